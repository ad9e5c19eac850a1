package qdisc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// edtKernel is package edt's path behind the edtPath interface.
type edtKernel struct{ e *edt.EDT }

func (k edtKernel) Set(key edtKey, e edtEntry, ttl time.Duration) error {
	d := edt.Write
	switch e.dir {
	case direction.Read:
		d = edt.Read
	case direction.Both:
		d = edt.Both
	}
	en := edt.Entry{Split: e.split, Dir: d, Delay: e.delay, Armed: e.armed, Rise: edtRise(e.rise)}
	return k.e.SetEntry(key.addr, key.port, en, ttl)
}

// edtRise is r in the program's integers: the factor per mille.
func edtRise(r packetpath.RiseLimit) edt.Rise {
	return edt.Rise{Permille: uint64(math.Round(max(r.Factor, 0) * 1000)), Step: r.Step}
}

func (k edtKernel) Free(key edtKey) error { return k.e.Free(key.addr, key.port) }

func (k edtKernel) Totals() (edtTotals, error) {
	t, err := k.e.Totals()
	q, qerr := k.e.Queue()
	var bypassers []packetpath.ConsumerStats
	if t.Bypassed > 0 {
		per, perr := k.e.Counters()
		bypassers, err = bypassersOf(per), errors.Join(err, perr)
	}
	return edtTotals{held: t.Delayed, passed: t.Passed, limited: t.Limited, bypassed: t.Bypassed, bypassers: bypassers,
		backlog: q.Packets, dropped: q.Dropped, late: q.Late}, errors.Join(err, qerr)
}

// bypassersOf are the initiators whose packets the classifier passed at
// its limit, summed over their ports, the most bypassed first, at most
// packetpath.MaxBypassers (as nfqueue's Stats.Bypassers).
func bypassersOf(per map[edt.Key]edt.Counters) []packetpath.ConsumerStats {
	by := map[netip.Addr]*packetpath.ConsumerStats{}
	for k, c := range per {
		if c.Bypassed == 0 {
			continue
		}
		s := by[k.Addr]
		if s == nil {
			s = &packetpath.ConsumerStats{Addr: k.Addr}
			by[k.Addr] = s
		}
		s.Delayed += c.Delayed
		s.Bypassed += c.Bypassed
	}
	out := make([]packetpath.ConsumerStats, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	return packetpath.SortBypassers(out)
}

func (k edtKernel) Attach() error { return k.e.Attach() }
func (k edtKernel) Detach() error { return k.e.Detach() }
func (k edtKernel) Close() error  { return k.e.Close() }

func (k edtKernel) Verify(force bool) ([]owned.Drift, error) {
	ds, err := k.e.Verify(force)
	out := make([]owned.Drift, len(ds))
	for i, d := range ds {
		out[i] = owned.Drift{Object: d.Object, Name: d.Name, Want: d.Want, Found: d.Found}
	}
	return out, err
}

// OpenEDT installs the edt path on cfg.Dev in this network namespace,
// after removing what an earlier run left; the device's instance lock
// keeps a second tc-style backend off it.
func OpenEDT(_ context.Context, cfg EDTConfig) (*EDT, error) {
	if cfg.Dev == "" {
		return nil, errors.New("the edt backend needs the interface the target reaches its initiators on (--dev)")
	}
	inst := cfg.Instance
	if inst == "" {
		inst = owned.DevInstance(cfg.Dev)
	}
	if err := owned.CheckInstance(inst); err != nil {
		return nil, err
	}
	lk, err := owned.LockInstance(0, inst)
	if err != nil {
		return nil, fmt.Errorf("%w; stop it first", err)
	}
	e, err := edt.New("", cfg.Dev)
	if err != nil {
		lk.Release()
		return nil, fmt.Errorf("%w (the edt backend needs sch_fq, clsact and BPF: a distribution kernel has them; use nfqueue elsewhere)", err)
	}
	b := newEDT(edtKernel{e}, DefaultEDTTTL, cfg.Logger)
	b.small = cfg.SmallSegments
	if cfg.SmallSegment > 0 {
		b.smallDef = cfg.SmallSegment
	}
	b.ilock = lk
	b.linger = cfg.Linger
	return b, nil
}

// NewEDT is the edt backend on a path already loaded (edt.New), without
// the instance lock OpenEDT takes: for a test that loads the program in
// a network namespace of its own. grace 0 is DefaultIdleGrace.
func NewEDT(e *edt.EDT, ttl, grace time.Duration, log *slog.Logger) *EDT {
	b := newEDT(edtKernel{e}, ttl, log)
	if grace > 0 {
		b.grace = grace
	}
	return b
}
