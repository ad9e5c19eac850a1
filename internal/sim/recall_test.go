package sim

import (
	"slices"
	"testing"
)

// laterBursts are the writers' bursts after the first of a run
// (burstSpans): how long each took, and its seconds with the reader over
// limitMs.
func laterBursts(secs []Second, limitMs float64) (durations, over []float64) {
	spans := burstSpans(secs)
	for _, b := range spans[min(1, len(spans)):] {
		o := 0
		for k := b.start; k <= b.end; k++ {
			if overSecond(secs[k], limitMs) {
				o++
			}
		}
		durations = append(durations, float64(b.end-b.start+1))
		over = append(over, float64(o))
	}
	return durations, over
}

// TestRecallPriceOnLighterWriters measures what the recall (step 3 of
// the law) costs writers that come back lighter than they left, the
// price doc.go names: long-lull's load (bursts past ArmHold apart) with
// one or two of its three writer hosts gone after the first burst, so
// the later bursts meet the delay twelve writers needed. Over ten seeds,
// against the law with the recall off, the recall must still leave no
// more of their seconds over 1.2 × T, and may cost the lighter bursts at
// most 30 % more time (the writers' rate in them; the run's MB/s cannot
// show it, a burst being a fixed amount of data).
func TestRecallPriceOnLighterWriters(t *testing.T) {
	skipLong(t)
	const threshold, seeds = 15.0, 10
	for _, c := range []struct {
		name string
		gone []string // writer devices in the first burst only
	}{
		{"all return", nil},
		{"two thirds return", []string{"dm-3"}},
		{"a third returns", []string{"dm-2", "dm-3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := LongLullScenario()
			for i := range sc.Devices {
				if slices.Contains(c.gone, sc.Devices[i].Name) {
					sc.Devices[i].Bursts = 1
				}
			}
			var dur, over [2][]float64 // [0]: the full law, [1]: recall off
			for v, off := range [][]string{nil, {"recall"}} {
				for seed := int64(1); seed <= seeds; seed++ {
					cfg := DefaultConfig()
					cfg.Scenario, cfg.ThresholdMs, cfg.Duration, cfg.Seed, cfg.RulesOff = sc, threshold, longLullDuration, seed, off
					res, err := Run(cfg)
					if err != nil {
						t.Fatal(err)
					}
					d, o := laterBursts(res.Seconds, 1.2*threshold)
					dur[v], over[v] = append(dur[v], d...), append(over[v], o...)
				}
			}
			if len(dur[0]) == 0 || len(dur[1]) == 0 {
				t.Fatal("no burst after the first")
			}
			t.Logf("bursts after the first, %d seeds: with the recall %.1f ± %.1f s long, %.2f ± %.2f s over 1.2 × T; without %.1f ± %.1f s, %.2f ± %.2f s over",
				seeds, mean(dur[0]), sdev(dur[0]), mean(over[0]), sdev(over[0]), mean(dur[1]), sdev(dur[1]), mean(over[1]), sdev(over[1]))
			if mean(over[0]) > mean(over[1]) {
				t.Errorf("the recall left %.2f s over a burst, more than without it (%.2f)", mean(over[0]), mean(over[1]))
			}
			if r := mean(dur[0]) / mean(dur[1]); r > 1.3 {
				t.Errorf("the recall made the bursts %.2f times as long as without it: want at most 1.3", r)
			}
		})
	}
}
