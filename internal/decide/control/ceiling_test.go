package control

import (
	"testing"
	"time"
)

// wobbly: the output wobbles just under the ceiling, as pid's does at
// the rail while its P and D terms react to a noisy signal. A delay that
// presses on the ceiling without sitting exactly on it every tick
// (within pressShare of it) still raises the ceiling.
func TestCeilingRisesUnderAWobblyRail(t *testing.T) {
	l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 15, Alpha: 0.25,
		UMaxLimitMs: DefaultUMaxLimitMs})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	l.signalMs = 50
	var out Output
	for k := range 25 {
		now = now.Add(100 * time.Millisecond)
		l.controlMs = l.ceiling
		if k%2 == 1 {
			l.controlMs = 0.9 * l.ceiling
		}
		l.scaleCeiling(Observation{Now: now, Members: 1}, &out)
	}
	if out.UMaxMs <= 20 {
		t.Fatalf("ceiling %v after 2.5 s of a delay wobbling between 18 and 20 ms with the latency at 50 ms; want it raised", out.UMaxMs)
	}
}
