package control

import (
	"testing"
	"time"
)

// TestGainReleases: against a plant whose read latency answers the delay
// (the latency without delay halved by any delay of 1 ms or more) the
// loop keeps delaying; against one whose latency ignores it, the loop
// turns Futile and releases the delay, and with the rule off it does not.
func TestGainReleases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		helps   bool
		off     []string
		futile  bool
		delayed bool
	}{
		{"delay helps", true, nil, false, true},
		{"delay buys nothing", false, nil, true, false},
		{"delay buys nothing, rule off", false, []string{"gain"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 1, Alpha: 0.25,
				Headroom: DefaultHeadroom, UMaxLimitMs: DefaultUMaxLimitMs,
				IdleHold: DefaultIdleHold, ByWrites: true, Off: tc.off})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			var out Output
			futile := false
			for range 600 {
				raw := 2.0 // twice the threshold, whatever the delay
				if tc.helps {
					// The delay in force drains the queue: under the set
					// point from 1 ms of delay on.
					raw = 2.0 / (1 + 2*min(out.DelayMs, 1))
				}
				now = now.Add(100 * time.Millisecond)
				out = l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: raw, Members: 3, Writing: true})
				futile = futile || out.Futile
			}
			if futile != tc.futile {
				t.Errorf("futile %v, want %v (gain %.3f ms/ms)", futile, tc.futile, out.GainMsPerMs)
			}
			if (out.DelayMs > 0) != tc.delayed {
				t.Errorf("delay %.2f ms at the end, want delayed %v", out.DelayMs, tc.delayed)
			}
		})
	}
}

// TestGainForgetsAfterTheWritersLeave: a futile verdict is about the
// workload that earned it; a set empty for ArmHold forgets it, and the
// next writers meet a controller free to delay them.
func TestGainForgetsAfterTheWritersLeave(t *testing.T) {
	l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 1, Alpha: 0.25,
		Headroom: DefaultHeadroom, UMaxLimitMs: DefaultUMaxLimitMs,
		IdleHold: DefaultIdleHold, ByWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	step := func(members int, raw float64) Output {
		now = now.Add(100 * time.Millisecond)
		return l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: raw, Members: members, Writing: members > 0})
	}
	for range 300 {
		step(3, 2) // over the threshold whatever the delay
	}
	if !l.Futile() {
		t.Fatal("not futile after 30 s of a latency that ignores the delay")
	}
	for range int(ArmHold/(100*time.Millisecond)) + 2 {
		step(0, 0.1)
	}
	if l.Futile() {
		t.Fatal("still futile after the set was empty for ArmHold")
	}
	var out Output
	for range 20 {
		out = step(3, 2)
	}
	if out.DelayMs <= 0 {
		t.Errorf("new writers over the threshold not delayed: %+v", out)
	}
}

// TestGainSeesTheDelayReachTheWriters: a loop whose delay slows the
// writers' completions while the reads stay as slow is probed before
// gainSuspectAfter and turns Futile; one whose device completes writes
// at the full rate whatever the delay (a deep queue's backlog, not yet
// drained) is not probed before gainSuspectAfter, and neither is one
// whose reads got faster as the writers slowed, nor one whose writers
// the device slowed (a write-back cache that filled: each write waits
// there).
func TestGainSeesTheDelayReachTheWriters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(delayMs float64) (raw, writeKBs, awaitMs float64)
		early bool
	}{
		{"writers slowed, reads as slow", func(d float64) (float64, float64, float64) { return 2, 1e5 / (1 + d), 0.1 }, true},
		{"writes at the full rate", func(float64) (float64, float64, float64) { return 2, 1e5, 0.1 }, false},
		{"reads faster as the writers slow", func(d float64) (float64, float64, float64) {
			w := 1e5 / (1 + d)
			return 1.1 + 3*w/1e5, w, 0.1 // over the set point, yet bought
		}, false},
		{"writers slowed by the device", func(d float64) (float64, float64, float64) {
			if d < 1 {
				return 2, 1e5, 0.1
			}
			return 2, 1e3, 40
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewLoop(LoopConfig{Law: "pid", Params: DefaultParams(), ThresholdMs: 1, Alpha: 0.25,
				Headroom: DefaultHeadroom, UMaxLimitMs: DefaultUMaxLimitMs,
				IdleHold: DefaultIdleHold, ByWrites: true})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			var out Output
			probed := time.Duration(-1)
			for i := range 100 {
				raw, w, await := tc.plant(out.DelayMs)
				now = now.Add(100 * time.Millisecond)
				out = l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: raw, Members: 3, Writing: true,
					WriteKBs: w, WriteAwaitMs: await})
				if out.Probing && probed < 0 {
					probed = time.Duration(i+1) * 100 * time.Millisecond
				}
			}
			early := probed >= 0 && probed < gainSuspectAfter
			if early != tc.early {
				t.Errorf("first probe after %v (-1: none in 10 s), want before %v: %v", probed, gainSuspectAfter, tc.early)
			}
			if tc.early && !l.Futile() {
				t.Errorf("not futile after 10 s of a delay that slowed the writers and bought nothing (gain %.3f ms/ms)", out.GainMsPerMs)
			}
		})
	}
}
