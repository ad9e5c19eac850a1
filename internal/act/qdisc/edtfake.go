package qdisc

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
)

// FakeEDT is a kernel path for the edt backend that records what the
// backend asks of it, for the tests here and in package throttle (as
// owned.FakeKernel is for the chain and sets).
type FakeEDT struct {
	Calls  []string
	Closed bool
	Fail   bool // Set fails, as a full map would
	// Drift is what the next Verify finds missing; VerifyErr its error.
	Drift     []owned.Drift
	VerifyErr error
	// Held, Passed, Limited, Bypassed, Backlog, Dropped and Late are
	// what Totals reports.
	Held, Passed, Limited, Bypassed uint64
	Bypassers                       []packetpath.ConsumerStats
	Backlog                         int
	Dropped                         uint64
	Late                            time.Duration
}

// NewEDTOn is the edt backend on f, with entries that live ttl.
func NewEDTOn(f *FakeEDT, ttl time.Duration, log *slog.Logger) *EDT { return newEDT(f, ttl, log) }

// Verify records the call and returns Drift once.
func (f *FakeEDT) Verify(force bool) ([]owned.Drift, error) {
	f.Calls = append(f.Calls, fmt.Sprintf("verify force=%v", force))
	d := f.Drift
	f.Drift = nil
	return d, f.VerifyErr
}

// Set records the entry.
func (f *FakeEDT) Set(a edtKey, e edtEntry, ttl time.Duration) error {
	if f.Fail {
		return errors.New("map full")
	}
	c := fmt.Sprintf("set %s %s %v split %d ttl %v", a, e.dir, e.delay, e.split, ttl)
	if e.armed > 0 {
		c += fmt.Sprintf(" armed %v", e.armed)
	}
	if e.rise != packetpath.DefaultRiseLimit {
		c += fmt.Sprintf(" rise %+v", e.rise)
	}
	f.Calls = append(f.Calls, c)
	return nil
}

// Free records the entry freed.
func (f *FakeEDT) Free(a edtKey) error { f.Calls = append(f.Calls, "free "+a.String()); return nil }

// Close records that the path was closed.
func (f *FakeEDT) Close() error { f.Closed = true; return nil }

// Attach records the call.
func (f *FakeEDT) Attach() error { f.Calls = append(f.Calls, "attach"); return nil }

// Detach records the call.
func (f *FakeEDT) Detach() error { f.Calls = append(f.Calls, "detach"); return nil }

// Totals returns Held, Passed, Limited, Bypassed, Backlog, Dropped and
// Late.
func (f *FakeEDT) Totals() (edtTotals, error) {
	return edtTotals{held: f.Held, passed: f.Passed, limited: f.Limited, bypassed: f.Bypassed, bypassers: f.Bypassers, backlog: f.Backlog, dropped: f.Dropped, late: f.Late}, nil
}
