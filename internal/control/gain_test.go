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
				Headroom: DefaultHeadroom, Signal: SignalMean, UMaxLimitMs: DefaultUMaxLimitMs,
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
				out = l.Step(Observation{Now: now, Measured: true, Reads: true, RawMs: raw, Members: 3, Writing: true, Active: 3})
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
