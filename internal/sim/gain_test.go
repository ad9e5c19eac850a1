package sim

import (
	"fmt"
	"testing"
	"time"
)

// hostBound is the lab's fig5.11 workload (LabScenario) on disk
// profile, on a target whose reader waits for the target rather than for
// its disk: each read pays contentionMs more while the writers' bursts
// are on, whatever rate the packet delay leaves them (issue 33's lab
// finding on fast disks, Scenario.ReadContentionMs).
func hostBound(profile string, contentionMs float64) Scenario {
	sc := LabScenario()
	sc.Name = "host-bound-" + profile
	sc.Disk = mustProfile(profile)
	sc.ReadContentionMs = contentionMs
	return sc
}

// TestFutileDelayIsReleased: where delay buys (next to) no latency, pid
// with the gain rule leaves the reader within 3 % of no control and the
// writers at 95 % of it at least (issue 33's "never worse"), for
// thresholds between the reader's latency alone and loaded; without the
// rule it takes most of the writers' rate. The rule gets there by
// seeing its delay reach the writers (their completions fall, the reads
// do not): on elapsed time alone it had to wait out a deep queue's
// onset, and the writers lost 7–16 %. On ram the delay buys nothing at
// all (the device takes no time); on the ssd at most the queue's
// 0.16 ms of 2.3. One seed: neither model draws anything these runs
// depend on (seeds 1-3 gave the same figures).
func TestFutileDelayIsReleased(t *testing.T) {
	skipLong(t)
	for _, tc := range []struct {
		profile      string
		contentionMs float64
		thresholds   []float64 // alone: 0 (ram), 0.15 ms (ssd); loaded 1, 2.3 ms
	}{
		{"ram", 1, []float64{0.3, 0.7}},
		{"ssd", 2, []float64{0.5, 1}},
	} {
		for _, thr := range tc.thresholds {
			t.Run(fmt.Sprintf("%s/T=%g", tc.profile, thr), func(t *testing.T) {
				run := func(ctrl string, off ...string) Summary {
					cfg := DefaultConfig()
					cfg.Scenario, cfg.Controller, cfg.ThresholdMs = hostBound(tc.profile, tc.contentionMs), ctrl, thr
					cfg.Duration, cfg.RulesOff = 300*time.Second, off
					r, err := Run(cfg)
					if err != nil {
						t.Fatal(err)
					}
					return r.Summary
				}
				none, pid, ablated := run("none"), run("pid"), run("pid", "gain")
				t.Logf("none %+v %.1f MB/s; pid %+v %.1f MB/s (delay %.2f ms); -gain %+v %.1f MB/s",
					none.ReadLatencyMs, none.WriteMBs, pid.ReadLatencyMs, pid.WriteMBs, pid.ThrottleMs.Mean, ablated.ReadLatencyMs, ablated.WriteMBs)
				// 3 %: the reader waits the contention while any writer
				// is on, and the verdict's first seconds lengthen a
				// burst.
				if pid.ReadLatencyMs.Mean > none.ReadLatencyMs.Mean*1.03 || pid.ReadLatencyMs.P95 > none.ReadLatencyMs.P95*1.03 {
					t.Errorf("reader slower with pid: mean %.2f p95 %.2f, none %.2f %.2f", pid.ReadLatencyMs.Mean, pid.ReadLatencyMs.P95, none.ReadLatencyMs.Mean, none.ReadLatencyMs.P95)
				}
				if pid.WriteMBs < 0.95*none.WriteMBs {
					t.Errorf("writers %.1f MB/s with pid, want ≥ 95 %% of none's %.1f", pid.WriteMBs, none.WriteMBs)
				}
				if ablated.WriteMBs > 0.5*none.WriteMBs {
					t.Errorf("without the gain rule writers kept %.1f of %.1f MB/s: the scenario does not test the rule", ablated.WriteMBs, none.WriteMBs)
				}
			})
		}
	}
}

// TestGainQuietWhereDelayHelps: on the thesis's disk, where delay buys
// the reader its promise (fig5.11 at 15 ms), the loop holds its set
// point, never suspects its delay, and decides exactly what it decides
// without the gain rule.
func TestGainQuietWhereDelayHelps(t *testing.T) {
	skipLong(t)
	for _, seed := range []int64{1, 2, 3} {
		run := func(off ...string) Summary {
			cfg := DefaultConfig()
			cfg.Seed, cfg.RulesOff = seed, off
			r, err := Run(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return r.Summary
		}
		with, without := run(), run("gain")
		with.Gains, without.Gains = nil, nil // pointers to equal gains
		if with != without {
			t.Errorf("seed %d: the gain rule changed the thesis run: %+v, without it %+v", seed, with, without)
		}
		if with.ReadLatencyMs.P95 > 1.1*with.ThresholdMs {
			t.Errorf("seed %d: p95 %.2f ms over 1.1 × %g", seed, with.ReadLatencyMs.P95, with.ThresholdMs)
		}
	}
}
