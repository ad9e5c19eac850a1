package control

import (
	"testing"
	"time"
)

// SetThreshold moves the set point and keeps the delay: a tenant's
// stricter reader arriving does not restart the loop.
func TestSetThresholdKeepsTheDelay(t *testing.T) {
	l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 20, Alpha: 0.25, Headroom: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	var out Output
	for range 30 {
		now = now.Add(100 * time.Millisecond)
		out = l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: 40, Members: 3, Writing: true})
	}
	if out.ControlMs <= 0 {
		t.Fatalf("no delay after 3 s at twice the threshold: %+v", out)
	}
	was := out.ControlMs
	l.SetThreshold(10)
	if l.ThresholdMs() != 10 || l.TargetMs() != 9 {
		t.Fatalf("threshold %g, target %g: want 10 and 9", l.ThresholdMs(), l.TargetMs())
	}
	now = now.Add(100 * time.Millisecond)
	out = l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: 40, Members: 3, Writing: true})
	if out.TargetMs != 9 || out.ControlMs < was {
		t.Errorf("after the stricter threshold: target %g, delay %g (was %g); want 9 and no drop", out.TargetMs, out.ControlMs, was)
	}
	l.SetThreshold(0) // refused: the loop keeps its threshold
	if l.ThresholdMs() != 10 {
		t.Errorf("threshold 0 accepted: %g", l.ThresholdMs())
	}
}

// A stricter threshold is a step of the error: the controller's first
// answer to it is larger than a reload's bumpless move would give; a
// looser one moves without a kick.
func TestStricterThresholdKicks(t *testing.T) {
	run := func(move func(l *Loop)) (before, after float64) {
		l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 20, Alpha: 0.25, Headroom: 0.1})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(0, 0)
		obs := func() Output {
			now = now.Add(100 * time.Millisecond)
			return l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: 19, Members: 3, Writing: true})
		}
		for range 20 {
			obs()
		}
		before = obs().ControlMs
		move(l)
		return before, obs().ControlMs
	}
	b, kicked := run(func(l *Loop) { l.SetThreshold(10) })
	_, smooth := run(func(l *Loop) {
		nl, _ := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 10, Alpha: 0.25, Headroom: 0.1})
		nl.Adopt(l)
		*l = *nl
	})
	if !(kicked > smooth && kicked > b) {
		t.Errorf("a stricter reader's first tick: delay %.2f ms, a reload's %.2f (before %.2f): want the step answered at once", kicked, smooth, b)
	}
	_, looser := run(func(l *Loop) { l.SetThreshold(40) })
	_, looserReload := run(func(l *Loop) {
		nl, _ := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 40, Alpha: 0.25, Headroom: 0.1})
		nl.Adopt(l)
		*l = *nl
	})
	if looser != looserReload {
		t.Errorf("a looser threshold: delay %.3f, a reload's %.3f: want the same bumpless move", looser, looserReload)
	}
	t.Logf("delay before %.2f; stricter: %.2f (bumpless would be %.2f); looser %.2f", b, kicked, smooth, looser)
}
