package sim

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// sweepPoints are the thresholds of issue 13 (item 4), each on a device
// where it is a promise worth making: between the reader's wait alone
// and its wait behind the uncontrolled writers. The SSD (reader alone
// 0.15 ms, loaded 120 ms) carries 0.2–5 ms; the thesis's array (5.3 ms
// alone, 47 ms loaded) carries 10–30 ms; 50 ms, above the thesis
// writers' 47 ms mean, runs against surge24's 24 threads (67 ms loaded).
var sweepPoints = []struct {
	scenario    func() Scenario
	thresholdMs float64
}{
	{SSDScenario, 0.2}, {SSDScenario, 0.5}, {SSDScenario, 1}, {SSDScenario, 2}, {SSDScenario, 5},
	{ThesisScenario, 10}, {ThesisScenario, 15}, {ThesisScenario, 20}, {ThesisScenario, 30},
	{Surge24Scenario, 50},
}

// TestThresholdSweep: with the default gains and no per-threshold
// tuning, pid holds every promise from 0.2 to 50 ms, following the mean
// or the p95 of each tick's reads: the p95 of the reader's 1-second wait
// while the writers run is within 1.2 × threshold, and no more than 5 %
// of those seconds are above 1.2 × threshold. 300 s per run, seed 1; the
// runs go in parallel (about 10 s in all).
func TestThresholdSweep(t *testing.T) {
	if raceEnabled {
		t.Skip("21 runs of 300 s judge control, not races: about 10 s in the normal run, 4 minutes under the race detector")
	}
	// Each threshold must sit between the reader's wait alone and its
	// median wait behind the uncontrolled writers.
	var mu sync.Mutex
	loaded := map[string]Summary{}
	t.Run("uncontrolled", func(t *testing.T) {
		for _, mk := range []func() Scenario{SSDScenario, ThesisScenario, Surge24Scenario} {
			t.Run(mk().Name, func(t *testing.T) {
				t.Parallel()
				cfg := DefaultConfig()
				cfg.Scenario, cfg.Controller, cfg.Duration = mk(), "none", 120*time.Second
				s := run(t, cfg).Summary
				mu.Lock()
				loaded[s.Scenario] = s
				mu.Unlock()
			})
		}
	})
	for _, sig := range []string{"mean", "p95"} {
		for _, pt := range sweepPoints {
			sc := pt.scenario()
			th := pt.thresholdMs
			t.Run(fmt.Sprintf("%s/%s/%gms", sig, sc.Name, th), func(t *testing.T) {
				t.Parallel()
				if u := loaded[sc.Name]; !(u.ReaderIdleMs < th && th < u.ReadLatencyMs.P50) {
					t.Fatalf("%g ms on %s is no promise: the reader waits %.2f ms alone and %.1f ms (p50) behind the writers", th, sc.Name, u.ReaderIdleMs, u.ReadLatencyMs.P50)
				}
				cfg := DefaultConfig()
				cfg.Scenario, cfg.ThresholdMs, cfg.Signal = sc, th, sig
				s := run(t, cfg).Summary
				t.Logf("p95 %.3f ms (%.2f × T), %.1f %% of seconds over 1.2 × T, writers %.1f MB/s, delay mean %.2f ms",
					s.ReadLatencyMs.P95, s.ReadLatencyMs.P95/th, s.OverThresholdPct, s.WriteMBs, s.ThrottleMs.Mean)
				if s.ReadLatencyMs.P95 > 1.2*th || s.OverThresholdPct > 5 {
					t.Errorf("%s at %g ms on %s: p95 %.3f ms (%.2f × T), %.1f %% of seconds over 1.2 × T; want ≤ 1.2 × T and ≤ 5 %%",
						sig, th, sc.Name, s.ReadLatencyMs.P95, s.ReadLatencyMs.P95/th, s.OverThresholdPct)
				}
			})
		}
	}
}
