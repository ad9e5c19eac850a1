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
