package control

import (
	"testing"
	"time"
)

// TestLoopOnsetSwitch: a second member writing, after one has been held
// for longer than learnAfter, doubles the output at once; with the onset
// rule off (LoopConfig.Off) it does not.
func TestLoopOnsetSwitch(t *testing.T) {
	for _, off := range [][]string{nil, {"onset"}} {
		l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 15, Alpha: 0.25,
			Headroom: DefaultHeadroom, Signal: SignalMean, UMaxLimitMs: DefaultUMaxLimitMs,
			IdleHold: DefaultIdleHold, ByWrites: true, Off: off})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		step := func(active int, raw float64) Output {
			now = now.Add(100 * time.Millisecond)
			return l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: raw,
				Members: active, Writing: true, Active: active})
		}
		for range 30 {
			step(1, 20)
		}
		before := step(1, l.TargetMs()).ControlMs
		after := step(2, l.TargetMs()).ControlMs
		scaled := after > 1.8*before
		if before <= 0 || scaled != (off == nil) {
			t.Errorf("off %v: output %.3f → %.3f when a second member wrote; want scaled %v", off, before, after, off == nil)
		}
	}
}

// TestLawRulesOnlyPID: the switchable rules reach into pid's state, so
// the table gives them to pid alone, and NewLoop refuses a law that has
// them otherwise.
func TestLawRulesOnlyPID(t *testing.T) {
	for law, r := range LawRules {
		if law != "pid" && r != (Rules{}) {
			t.Errorf("law %s runs switchable rules %+v", law, r)
		}
	}
	if err := CheckRules([]string{"onset", "nonsense"}); err == nil {
		t.Error("CheckRules accepted an unknown rule")
	}
}
