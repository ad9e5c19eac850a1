package control

import (
	"math"
	"testing"
	"time"
)

// relapseRun drives a pid through an overload, a second just under the
// set point, a relapse (the signal at three times the set point for two
// ticks: u0, the delay in force in the healthy second's last tick, let
// the overload in again) and then a long healthy stretch, and returns
// u0 and the delay after each healthy tick.
func relapseRun(t *testing.T, guard bool, healthy int) (u0 float64, after []float64) {
	t.Helper()
	p := DefaultParams()
	c := NewPID(p)
	c.noRelapse = !guard
	for range 30 {
		c.Update(2 * p.TargetMs) // the first overload, from rest
	}
	if c.relapse.at != 0 {
		t.Fatalf("an overload from rest remembered %v ms: nothing let it in", c.relapse.at)
	}
	for range 10 {
		u0 = c.u
		c.Update(0.9 * p.TargetMs) // healthy: the delay winds down
	}
	for range 2 {
		c.Update(3 * p.TargetMs) // the relapse
	}
	if c.u <= u0 {
		t.Fatalf("the relapse raised no delay (%v ms from %v)", c.u, u0)
	}
	if guard && c.relapse.at != u0 {
		t.Fatalf("the guard remembered %v ms, want %v, the delay in force when the signal was last healthy", c.relapse.at, u0)
	}
	if zone := relapseMargin * u0; zone > 0.9*p.UMaxMs {
		t.Fatalf("the slow zone (%v ms) reaches the clamp (%v ms): the case does not show the fast fall above it", zone, p.UMaxMs)
	}
	for range healthy {
		after = append(after, c.Update(0.5*p.TargetMs))
	}
	return u0, after
}

// TestRelapseGuardSlowsTheFallBackToTheCliff: a delay that let an
// overload in is remembered, and the delay falls fast only down to
// relapseMargin × it; under that, at relapseHalfLife, for relapseHold.
// Without the guard the same healthy seconds take the delay back under
// the one that let the overload in within a second.
func TestRelapseGuardSlowsTheFallBackToTheCliff(t *testing.T) {
	tick := DefaultParams().T
	ticks := func(d time.Duration) int { return int(d / tick) }
	u0, on := relapseRun(t, true, ticks(relapseHold)+ticks(5*time.Second))
	_, off := relapseRun(t, false, ticks(5*time.Second))
	t.Logf("u0 %.2f ms; with the guard %.2f ms after 1 s, %.2f after 10 s; without %.2f after 1 s", u0, on[ticks(time.Second)], on[ticks(10*time.Second)], off[ticks(time.Second)])

	if got := off[ticks(time.Second)]; got >= u0 {
		t.Fatalf("without the guard the delay is %v ms a second after the relapse, not under u0 = %v: the case is not exercised", got, u0)
	}
	zone := relapseMargin * u0
	at10 := on[ticks(10*time.Second)-1]
	if want := zone * math.Exp2(-10/relapseHalfLife.Seconds()); at10 < want*0.99 || at10 > zone {
		t.Errorf("with the guard, 10 s after the relapse: %v ms, want %.3f (relapseMargin × u0 = %.3f falling at relapseHalfLife)", at10, want, zone)
	}
	end := on[len(on)-1]
	if end >= u0 {
		t.Errorf("past relapseHold the delay is still %v ms, not under u0 = %v: the guard must forget", end, u0)
	}
}

// TestLoopReportsTheRelapseGuard: the loop's output says, while the guard
// holds, which delay let the last overload in (status, metrics and the
// record show it), and 0 once it has forgotten, or with the rule off.
func TestLoopReportsTheRelapseGuard(t *testing.T) {
	for _, off := range [][]string{nil, {"relapse"}} {
		l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 15, Alpha: 1,
			UMaxLimitMs: DefaultUMaxLimitMs, Off: off})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		step := func(rawMs float64) Output {
			now = now.Add(100 * time.Millisecond)
			return l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: rawMs, Members: 3, Writing: true})
		}
		for range 20 {
			step(40) // an overload from rest: nothing let it in
		}
		// The delay in force in a tick is the one decided the tick before.
		inForce, next := 0.0, step(10).ControlMs
		for range 10 {
			inForce, next = next, step(10).ControlMs // healthy
		}
		got := step(60).RelapseMs // the overload that delay let in
		if want := inForce; off == nil && got != want || off != nil && got != 0 {
			t.Errorf("rules off %v: RelapseMs %v at the relapse, want %v", off, got, want)
		}
		var last Output
		for range int(relapseHold / DefaultParams().T) {
			last = step(10)
		}
		if last.RelapseMs != 0 {
			t.Errorf("rules off %v: RelapseMs %v past relapseHold, want 0", off, last.RelapseMs)
		}
	}
}

// TestRelapseHoldDoublesWhileTheCliffReturns: an onset while the guard
// holds, or within a hold of its end, doubles the hold up to
// relapseHoldMax; one after a longer quiet starts from relapseHold.
func TestRelapseHoldDoublesWhileTheCliffReturns(t *testing.T) {
	tick := DefaultParams().T
	ticks := func(d time.Duration) int { return int(d / tick) }
	var g relapseGuard
	run := func(n int, e float64) {
		for range n {
			g.limit(10, e, -0.01, tick)
		}
	}
	onset := func() int {
		run(1, -0.5) // healthy at 10 ms
		run(1, 2)    // the signal at three times the set point
		return g.holdTicks(tick)
	}
	steps := []struct {
		quiet time.Duration // healthy before the onset
		want  time.Duration // the hold it starts
	}{
		{0, relapseHold}, // the first
		{relapseHold + 10*time.Second, 2 * relapseHold}, // 10 s after the hold ended
		{30 * time.Second, 4 * relapseHold},             // while it holds
		{0, relapseHoldMax},                             // and no further
		{2*relapseHoldMax + time.Second, relapseHold},   // after a long quiet
	}
	for i, s := range steps {
		run(ticks(s.quiet), -0.5)
		if got := onset(); got != ticks(s.want) {
			t.Fatalf("onset %d after %v healthy: hold %v, want %v", i, s.quiet, time.Duration(got)*tick, s.want)
		}
	}
	run(ticks(relapseHold)+10, -0.5)
	if got := g.holding(tick); got != 0 {
		t.Errorf("past relapseHold after a long quiet the guard still holds %v ms", got)
	}
}
