package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

func TestCtlManualOverrideWins(t *testing.T) {
	ov := &ctl.Overrides{}
	be := &fakeBackend{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{decisions: []Decision{dec(20, 2, "10.99.0.3", "10.99.0.4")}},
		Stats: &fakeStats{}, Backend: be, Logger: newLogger(&logBuf{}), Overrides: ov})
	if err != nil {
		t.Fatal(err)
	}
	h := d.CtlHandler(ov)
	ctx := context.Background()
	d.tick(ctx, t0)

	resp := h.Handle(ctx, ctl.Request{Op: ctl.OpThrottle, IP: "10.99.0.3", Delay: "7ms", Direction: "both"})
	if !resp.OK {
		t.Fatalf("throttle: %s", resp.Error)
	}
	d.tick(ctx, t0.Add(100*time.Millisecond))
	if len(be.applied) != 2 {
		t.Fatalf("%d applies, want 2 (the override changed the state)", len(be.applied))
	}
	st := be.applied[1]
	if len(st.Groups) != 2 {
		t.Fatalf("groups = %+v, want the resource's and the manual one", st.Groups)
	}
	if g := st.Groups[0]; g.Name != "fs-lab" || len(g.Members) != 1 || g.Members[0].String() != "10.99.0.4" {
		t.Errorf("resource group = %+v, want only 10.99.0.4 (10.99.0.3 is manual)", g)
	}
	if g := st.Groups[1]; g.Name != ctl.GroupName(g.Members[0]) || g.WriteDelay != 7*time.Millisecond || g.ReadDelay != 7*time.Millisecond {
		t.Errorf("manual group = %+v", g)
	}

	resp = h.Handle(ctx, ctl.Request{Op: ctl.OpStatus})
	var sources []string
	for _, th := range resp.Throttles {
		sources = append(sources, th.IP+"="+th.Source+"/"+th.Delay)
	}
	if got := strings.Join(sources, " "); got != "10.99.0.3=manual/7ms 10.99.0.4=fs-lab/2.00ms" || resp.Stats == nil || resp.Mode != "autonomic" {
		t.Errorf("status throttles = %q (stats %v, mode %q)", got, resp.Stats, resp.Mode)
	}

	if resp := h.Handle(ctx, ctl.Request{Op: ctl.OpFree, IP: "10.99.0.3"}); !resp.OK {
		t.Fatalf("free: %s", resp.Error)
	}
	d.tick(ctx, t0.Add(200*time.Millisecond))
	st = be.applied[len(be.applied)-1]
	if len(st.Groups) != 1 || len(st.Groups[0].Members) != 2 {
		t.Errorf("after free, state = %+v, want the resource group with both members", st.Groups)
	}
}

func TestCtlBadRequests(t *testing.T) {
	ov := &ctl.Overrides{}
	d, _ := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{}, Stats: &fakeStats{}, Backend: &fakeBackend{}, Overrides: ov,
		Logger: newLogger(&logBuf{})})
	h := d.CtlHandler(ov)
	for _, r := range []ctl.Request{
		{Op: ctl.OpThrottle, IP: "nonsense", Delay: "1ms"},
		{Op: ctl.OpThrottle, IP: "10.0.0.1", Delay: "5s"},
		{Op: ctl.OpFree, IP: "10.0.0.1"},
		{Op: "reboot"},
	} {
		if resp := h.Handle(context.Background(), r); resp.OK || resp.Error == "" {
			t.Errorf("%+v accepted: %+v", r, resp)
		}
	}
	if len(ov.List()) != 0 {
		t.Errorf("bad requests changed the overrides: %v", ov.List())
	}
}
