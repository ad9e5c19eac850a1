package ctl

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/throttle"
)

func TestParseManualRate(t *testing.T) {
	m, err := ParseManual(Request{IP: "10.0.0.3", Rate: "10MB/s"})
	if err != nil || m.Rate != 10_000_000 || m.Delay != 0 || m.Direction != throttle.Read {
		t.Fatalf("rate request parsed as %+v, %v; want a 10 MB/s read cap", m, err)
	}
	if m.Kind() != "read rate 10MB/s" {
		t.Errorf("Kind() = %q", m.Kind())
	}
	for _, c := range []struct {
		r    Request
		want string
	}{
		{Request{IP: "10.0.0.3", Rate: "10MB/s", Delay: "1ms"}, "not both"},
		{Request{IP: "10.0.0.3", Rate: "10MB/s", Direction: "write"}, "caps reads only"},
		{Request{IP: "10.0.0.3", Rate: "10MB/s", Direction: "both"}, "caps reads only"},
		{Request{IP: "10.0.0.3", Rate: "0MB/s"}, "not above 0"},
		{Request{IP: "10.0.0.3", Rate: "-1MB/s"}, "not above 0"},
		{Request{IP: "10.0.0.3", Rate: "fast"}, "want a number and a unit"},
		{Request{IP: "10.0.0.3", Rate: "100Gbit/s"}, "above"},
	} {
		if _, err := ParseManual(c.r); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.r, err, c.want)
		}
	}
}

// kinds is a backend that says what it throttles.
type kinds struct {
	recBackend
	k throttle.Kinds
}

func (b *kinds) Kinds() throttle.Kinds { return b.k }

func TestCheck(t *testing.T) {
	delay, _ := ParseManual(Request{IP: "10.0.0.3", Delay: "5ms"})
	rate, _ := ParseManual(Request{IP: "10.0.0.3", Rate: "10MB/s"})
	delayOnly := &kinds{k: throttle.Kinds{Delay: true}}
	rateOnly := &kinds{k: throttle.Kinds{Rate: true}}
	both := &kinds{k: throttle.Kinds{Delay: true, Rate: true}}
	for _, c := range []struct {
		name      string
		m, prev   Manual
		had       bool
		b         throttle.Backend
		wantError string
	}{
		{"rate on a delay backend", rate, Manual{}, false, delayOnly, "--rate-dev"},
		{"delay on a rate backend", delay, Manual{}, false, rateOnly, "caps read rates only"},
		{"rate over a delay", rate, delay, true, both, "free it first"},
		{"delay over a rate", delay, rate, true, both, "free it first"},
		{"rate over a rate", rate, rate, true, both, ""},
		{"delay over a delay", delay, delay, true, delayOnly, ""},
		{"rate, nothing before", rate, Manual{}, false, both, ""},
	} {
		err := Check(c.m, c.prev, c.had, c.b, t.TempDir())
		switch {
		case c.wantError == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.wantError != "" && (err == nil || !strings.Contains(err.Error(), c.wantError)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantError)
		}
	}
}

// TestCheckLinkSpeed: a rate above the rate interface's link is refused
// where sysfs knows the speed.
func TestCheckLinkSpeed(t *testing.T) {
	ctx := context.Background()
	h, err := throttle.NewHTB(ctx, throttle.TCConfig{Dev: "eth9", Run: nopRunner{}, Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	sys := t.TempDir()
	if err := os.MkdirAll(filepath.Join(sys, "class/net/eth9"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "class/net/eth9/speed"), []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fast, _ := ParseManual(Request{IP: "10.0.0.3", Rate: "20MB/s"})
	if err := Check(fast, Manual{}, false, h, sys); err == nil || !strings.Contains(err.Error(), "link speed (12.5MB/s)") {
		t.Errorf("20 MB/s on a 100 Mbit/s link: %v, want refused naming the link speed", err)
	}
	slow, _ := ParseManual(Request{IP: "10.0.0.3", Rate: "5MB/s"})
	if err := Check(slow, Manual{}, false, h, sys); err != nil {
		t.Errorf("5 MB/s on a 100 Mbit/s link: %v", err)
	}
}

type nopRunner struct{}

func (nopRunner) Run(context.Context, string, string, ...string) (string, error) { return "", nil }

// TestManualRateThroughHandler: a rate becomes an htb group; a delay on
// the same consumer is refused and leaves the rate in force; the
// configuration's rates are listed with their source.
func TestManualRateThroughHandler(t *testing.T) {
	ctx := context.Background()
	b := &kinds{k: throttle.Kinds{Delay: true, Rate: true}}
	h := NewManualHandler(b)
	if err := h.Overrides.SetReadRates(map[string]string{"10.0.0.5": "2MiB/s"}, []uint16{3260}); err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if r := h.Handle(ctx, Request{Op: OpThrottle, IP: "10.0.0.3", Rate: "10MB/s"}); !r.OK {
		t.Fatalf("rate refused: %s", r.Error)
	}
	if r := h.Handle(ctx, Request{Op: OpThrottle, IP: "10.0.0.3", Delay: "5ms"}); r.OK || !strings.Contains(r.Error, "free it first") {
		t.Fatalf("delay over a rate: %+v", r)
	}
	last := b.states[len(b.states)-1]
	want := map[string]uint64{"10.0.0.3": 10_000_000, "10.0.0.5": 2 << 20}
	if len(last.Groups) != 2 {
		t.Fatalf("state %+v, want two rate groups", last)
	}
	for _, g := range last.Groups {
		if g.ReadRate != want[g.Members[0].String()] || g.WriteDelay != 0 || g.ReadDelay != 0 {
			t.Errorf("group %+v, want read rate %d and no delay", g, want[g.Members[0].String()])
		}
	}
	r := h.Handle(ctx, Request{Op: OpList})
	if len(r.Throttles) != 2 || r.Throttles[0].Rate != "10MB/s" || r.Throttles[0].Delay != "" ||
		r.Throttles[1].Source != "config" || r.Throttles[1].Rate != "2.097152MB/s" {
		t.Errorf("list %+v", r.Throttles)
	}
	if r := h.Handle(ctx, Request{Op: OpFree, IP: "10.0.0.3"}); !r.OK {
		t.Fatal(r.Error)
	}
	if _, ok := h.Overrides.Get(netip.MustParseAddr("10.0.0.3")); ok {
		t.Error("freed rate still listed")
	}
	if err := h.Overrides.SetReadRates(map[string]string{"10.0.0.6": "0B/s"}, nil); err == nil {
		t.Error("a zero configured rate was accepted")
	}
}

// renewing is a backend whose delays lapse unless renewed.
type renewing struct {
	recBackend
	mu       sync.Mutex
	renewals int
}

func (b *renewing) Renew(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.renewals++
	return nil
}

// TestManualRenews: the manual daemon, which has no tick, renews a
// Renewer backend on its own (edt's delays would lapse after a second).
func TestManualRenews(t *testing.T) {
	b := &renewing{}
	h := NewManualHandler(b)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	h.RenewEvery(ctx, 20*time.Millisecond, slog.New(slog.DiscardHandler))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.renewals < 3 {
		t.Errorf("%d renewals in 300 ms at one per 20 ms", b.renewals)
	}
	// A backend without expiry returns at once.
	done := make(chan struct{})
	go func() {
		NewManualHandler(&recBackend{}).RenewEvery(context.Background(), time.Millisecond, nil)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Error("RenewEvery on a backend without renewal did not return")
	}
}
