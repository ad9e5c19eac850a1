package daemon

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

// TestCtlRuntimeTerms: 'sanqos throttle --share' reaches the engine at
// the next tick over the file's terms, shows in /status with the
// consumer's name, outlives a reload (laid over the new file's terms)
// and, cleared, leaves the file's.
func TestCtlRuntimeTerms(t *testing.T) {
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1", IQNs: []string{"iqn.2026-01.lab:reader"}}, {Addr: writer, Device: "loop2"},
	}}}}
	newEngine := func(thresholdMs float64) *engine.Engine {
		t.Helper()
		b, err := tenant.New([]tenant.Entry{{Match: []string{"10.99.0.3"}, Terms: tenant.Terms{Name: "db1", Share: 2, ThresholdMs: thresholdMs}}}, "")
		if err != nil {
			t.Fatal(err)
		}
		cfg := openLoopConfig()
		cfg.Tenants = b
		e, err := engine.New(cfg, topo)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	ov := &ctl.Overrides{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: FromEngine(newEngine(8), []uint16{3260}, nil), Stats: &loadStats{readMs: 1, writeKBs: 100},
		Backend: &fakeBackend{}, Logger: newLogger(&logBuf{}), Topology: topo, Overrides: ov})
	if err != nil {
		t.Fatal(err)
	}
	h := d.CtlHandler(ov)
	ctx := context.Background()
	now := t0
	run := func() {
		for range 3 {
			now = now.Add(100 * time.Millisecond)
			d.tick(ctx, now)
		}
	}
	terms := func() (reader, writer tenant.Terms, names [2]string) {
		t.Helper()
		cs := d.Status().Consumers
		if len(cs) != 2 {
			t.Fatalf("consumers %+v", cs)
		}
		return cs[0].Terms, cs[1].Terms, [2]string{cs[0].Name, cs[1].Name}
	}
	run()
	_, w, names := terms()
	if names != [2]string{"iqn.2026-01.lab:reader", "db1"} || w.Share != 2 || w.ThresholdMs != 8 {
		t.Fatalf("from the file: names %v, db1 %+v", names, w)
	}

	if r := h.Handle(ctx, ctl.Request{Op: ctl.OpTerms, TermsRequest: ctl.TermsRequest{Match: "db1", Share: "4", Cap: "50MB/s"}}); !r.OK {
		t.Fatalf("terms: %s", r.Error)
	}
	if r := h.Handle(ctx, ctl.Request{Op: ctl.OpTerms, TermsRequest: ctl.TermsRequest{Match: "10.99.0.2", Threshold: "5ms"}}); !r.OK {
		t.Fatalf("terms: %s", r.Error)
	}
	for _, bad := range []ctl.TermsRequest{{Match: "db1", Share: "-1"}, {Match: "db1"}} {
		if r := h.Handle(ctx, ctl.Request{Op: ctl.OpTerms, TermsRequest: bad}); r.OK {
			t.Errorf("%+v accepted", bad)
		}
	}
	run()
	r, w, _ := terms()
	if w.Share != 4 || w.CapBps != 50e6 || w.ThresholdMs != 8 || w.Name != "db1" || r.ThresholdMs != 5 {
		t.Errorf("runtime terms: reader %+v, db1 %+v; want share 4, cap 50MB/s over the file's threshold 8ms, reader 5ms", r, w)
	}
	if l := h.Handle(ctx, ctl.Request{Op: ctl.OpList}); len(l.Terms) != 2 || l.Terms[0].Terms != "share 4, cap 50MB/s" {
		t.Errorf("list shows terms %+v", l.Terms)
	}

	// A reload builds an engine from the new file: the runtime terms stay
	// over its terms.
	d.Reload(Reload{Decider: FromEngine(newEngine(12), []uint16{3260}, nil)})
	run()
	if _, w, _ := terms(); w.Share != 4 || w.ThresholdMs != 12 {
		t.Errorf("after the reload db1 %+v, want the runtime share 4 over the new file's threshold 12ms", w)
	}

	if r := h.Handle(ctx, ctl.Request{Op: ctl.OpClearTerms, TermsRequest: ctl.TermsRequest{Match: "db1"}}); !r.OK {
		t.Fatalf("clear-terms: %s", r.Error)
	}
	if r := h.Handle(ctx, ctl.Request{Op: ctl.OpClearTerms, TermsRequest: ctl.TermsRequest{Match: "db1"}}); r.OK {
		t.Error("clearing db1 twice succeeded")
	}
	run()
	if _, w, _ := terms(); w.Share != 2 || w.CapBps != 0 {
		t.Errorf("after clear-terms db1 %+v, want the file's share 2 and no cap", w)
	}
}

// TestConflictLogged: a tenant conflict is said once when it begins, at
// warning, and once when it is over.
func TestConflictLogged(t *testing.T) {
	conflict := func(c string) Decision {
		d := dec(20, 2, "10.99.0.3")
		d.Resources[0].Conflict = c
		return d
	}
	why := "the reservation of backup (20MB/s) breaks the read promise; the promise wins"
	logs := &logBuf{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{decisions: []Decision{conflict(""), conflict(why), conflict(why), conflict("")}},
		Stats: &fakeStats{}, Backend: &fakeBackend{}, Logger: newLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		d.tick(context.Background(), t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	if n := logs.count("level=WARN", "tenant conflict", "resource=fs-lab", "breaks the read promise"); n != 1 {
		t.Errorf("conflict begun logged %d times, want 1:\n%s", n, logs)
	}
	if n := logs.count("tenant conflict over", "resource=fs-lab"); n != 1 {
		t.Errorf("conflict over logged %d times, want 1:\n%s", n, logs)
	}
}
