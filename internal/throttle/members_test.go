package throttle

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestMembersLingerUntilQuiet: a member whose throttle ends stays queued
// (in its set, delay 0) while its traffic goes on, also when its group is
// gone, and leaves once it paused; a busy one leaves after lingerMax.
func TestMembersLingerUntilQuiet(t *testing.T) {
	ctx := context.Background()
	k := NewFakeKernel()
	rec := newReconciler(k, k)
	var ms members
	now := time.Unix(1000, 0)
	a := ip("10.0.0.2")
	busy := map[netip.Addr]bool{a: true}
	quiet := func(x netip.Addr) bool { return !busy[x] }
	step := func(s *State, d time.Duration) (string, bool) {
		t.Helper()
		now = now.Add(d)
		if s != nil {
			tab := ms.update(*s, now)
			if _, ok := tab[a]; ok != (len(s.Groups) > 0 && s.Groups[0].Active()) {
				t.Fatalf("delay table %v for state %+v", tab, *s)
			}
		}
		rules, sets, lingering := ms.plan(now, 1, quiet)
		if err := rec.apply(ctx, rules, sets); err != nil {
			t.Fatal(err)
		}
		return k.String(), lingering
	}
	on := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{a}, WriteDelay: 20 * time.Millisecond}}}
	off := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{a}}}}

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
	if got, l := step(&State{}, time.Millisecond); !l || !strings.Contains(got, "--match-set sanqos-vg dst") || !strings.Contains(got, "set sanqos-vg: 10.0.0.2") {
		t.Fatalf("vanished group's member not kept queued:\n%s", got)
	}
	if got, l := step(nil, lingerMax); l || got != "" {
		t.Fatalf("busy member still queued after lingerMax:\n%s", got)
	}
	// Its flows are remembered for riseKeep after it left (an armed
	// writer that paused must not ramp from 0), then forgotten.
	if !ms.keep(a, now) {
		t.Fatal("a member's flows were forgotten as soon as it left")
	}
	if ms.keep(a, now.Add(riseKeep)) {
		t.Fatal("keep still reports a member that left riseKeep ago")
	}
}
