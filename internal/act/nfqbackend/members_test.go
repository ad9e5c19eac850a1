package nfqbackend

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// TestMembersLingerUntilQuiet: a member whose throttle ends stays queued
// (in its set, delay 0) while its traffic goes on, also when its group is
// gone, and leaves once it paused; a busy one leaves after lingerMax.
func TestMembersLingerUntilQuiet(t *testing.T) {
	ctx := context.Background()
	k := owned.NewFakeKernel()
	rec := owned.NewReconciler(k, k)
	var ms members
	now := time.Unix(1000, 0)
	a := ip("10.0.0.2")
	busy := map[netip.Addr]bool{a: true}
	quiet := func(x netip.Addr) bool { return !busy[x] }
	step := func(s *plan.State, d time.Duration) (string, bool) {
		t.Helper()
		now = now.Add(d)
		if s != nil {
			tab := ms.update(*s, now)
			if _, ok := tab[a]; ok != (len(s.Groups) > 0 && s.Groups[0].Active()) {
				t.Fatalf("delay table %v for state %+v", tab, *s)
			}
		}
		rules, sets, lingering := ms.plan(now, 1, quiet)
		if err := rec.Apply(ctx, rules, sets); err != nil {
			t.Fatal(err)
		}
		return k.String(), lingering
	}
	on := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{a}, WriteDelay: 20 * time.Millisecond}}}
	off := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{a}}}}

	if got, _ := step(&on, 0); !strings.Contains(got, "set sanqos-vg: 10.0.0.2") {
		t.Fatalf("throttled member not in its set:\n%s", got)
	}
	if got, l := step(&off, time.Millisecond); !l || !strings.Contains(got, "set sanqos-vg: 10.0.0.2") {
		t.Fatalf("member left its set while its traffic goes on:\n%s", got)
	}
	busy[a] = false
	if got, l := step(nil, 5*time.Millisecond); !l || !strings.Contains(got, "set sanqos-vg: 10.0.0.2") {
		t.Fatalf("member left before its longest delay (20ms) passed:\n%s", got)
	}
	if got, l := step(nil, 20*time.Millisecond); l || strings.Contains(got, "10.0.0.2") {
		t.Fatalf("quiet member still queued after its delay:\n%s", got)
	}

	// The group disappears altogether: its rule stays while the member lingers.
	busy[a] = true
	step(&on, time.Millisecond)
	if got, l := step(&plan.State{}, time.Millisecond); !l || !strings.Contains(got, "--match-set sanqos-vg dst") || !strings.Contains(got, "set sanqos-vg: 10.0.0.2") {
		t.Fatalf("vanished group's member not kept queued:\n%s", got)
	}
	if got, l := step(nil, lingerMax); l || got != "" {
		t.Fatalf("busy member still queued after lingerMax:\n%s", got)
	}
	// Its flows are remembered for RiseKeep after it left (an armed
	// writer that paused must not ramp from 0), then forgotten.
	if !ms.keep(a, now) {
		t.Fatal("a member's flows were forgotten as soon as it left")
	}
	if ms.keep(a, now.Add(RiseKeep)) {
		t.Fatal("keep still reports a member that left RiseKeep ago")
	}
}

// TestMembersNewDelayOnly: a state that changes only delays reaches
// every consumer's delays (one group, two groups, an armed consumer),
// while a change of members in the caller's own slice, reused in place,
// is seen as the change it is; and only an address that stops being
// kept asks the packet path to forget (forgetDue).
func TestMembersNewDelayOnly(t *testing.T) {
	var mb members
	now := time.Unix(1000, 0)
	a, b, c, armed := ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4"), ip("10.0.0.9")
	both := []netip.Addr{a, b}
	s := plan.State{Groups: []plan.Group{
		{Name: "vg", Members: both, WriteDelay: 10 * ms},
		{Name: "pool", Members: []netip.Addr{b}, ReadDelay: 4 * ms, Armed: []netip.Addr{armed}, ArmedDelay: 7 * ms},
	}}
	check := func(what string, want map[netip.Addr]dirDelays) {
		t.Helper()
		tab := mb.update(s, now)
		for x, w := range want {
			if tab[x] != w {
				t.Errorf("%s: %v has %+v, want %+v", what, x, tab[x], w)
			}
		}
	}
	check("first", map[netip.Addr]dirDelays{a: {write: 10 * ms}, b: {write: 10 * ms, read: 4 * ms}, armed: {write: 7 * ms}})
	if mb.forgetDue() {
		t.Error("a first state asks to forget")
	}
	s.Groups[0].WriteDelay, s.Groups[1].ReadDelay, s.Groups[1].ArmedDelay = 25*ms, 9*ms, 3*ms
	check("new delays", map[netip.Addr]dirDelays{a: {write: 25 * ms}, b: {write: 25 * ms, read: 9 * ms}, armed: {write: 3 * ms}})
	both[1] = c // the caller reuses its slice
	check("members changed in place", map[netip.Addr]dirDelays{a: {write: 25 * ms}, b: {read: 9 * ms}, c: {write: 25 * ms}})
	if mb.forgetDue() || !mb.keep(b, now) {
		t.Error("a member that left the group but lingers is forgotten")
	}
	s.Groups[1].Armed = nil
	check("disarmed", map[netip.Addr]dirDelays{armed: {}})
	if !mb.forgetDue() || mb.forgetDue() {
		t.Error("a consumer no longer armed does not ask, once, to forget")
	}
	s.Groups[0].WriteDelay = 0 // inactive: its members leave
	check("inactive", map[netip.Addr]dirDelays{a: {}, c: {}, b: {read: 9 * ms}})
	if !mb.keep(a, now) {
		t.Error("a member of a group that stopped is forgotten at once")
	}
}

// update is apply with the delays of every consumer in a map, for tests.
func (ms *members) update(s plan.State, now time.Time) delays {
	t := ms.apply(s, now)
	out := delays{}
	for a := range t.class {
		out[a] = t.of(a)
	}
	return out
}
