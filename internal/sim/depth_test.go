package sim

import (
	"math"
	"testing"
	"time"
)

// pipeScenario is one writer thread and the reader on a disk without
// service time, so that a write's time is the network's and the delay's
// alone: 0.5 ms out, factor 2 × the delay, 0.1 ms back.
func pipeScenario(depth int) Scenario {
	sc := ThesisScenario()
	sc.Name = "pipe"
	sc.Disk = mustProfile("ram")
	sc.Devices = sc.Devices[:2]
	sc.Devices[1].Threads = 1
	sc.BurstBytes = 1 << 40 // one burst for the whole run
	sc.Start = time.Second
	sc.WriteNetMs, sc.ResponseNetMs, sc.WriteDelayFactor = 0.5, 0.1, 2
	sc.WriteIODepth = depth
	return sc
}

func runFixed(t *testing.T, sc Scenario, delayMs float64) Summary {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Controller, cfg.FixedDelayMs, cfg.Duration = sc, "none", delayMs, 21*time.Second
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r.Summary
}

// TestDeepQueueDelayModel: a delay is paid by every outstanding write at
// once, so a connection at depth N moves N times what a sync one does
// under the same delay; a window caps it at a window per delay.
func TestDeepQueueDelayModel(t *testing.T) {
	const d = 10.0           // ms
	cycle := 0.5 + 2*d + 0.1 // one write's round, ms
	mbs := func(writesPerSec float64) float64 { return writesPerSec * 64 * 1024 / 1e6 }
	for _, tc := range []struct {
		name   string
		depth  int
		window int64
		want   float64 // MB/s
	}{
		{"sync: one write per round", 1, 0, mbs(1000 / cycle)},
		{"depth 8: eight writes per round", 8, 0, mbs(8 * 1000 / cycle)},
		{"depth 32: thirty-two", 32, 0, mbs(32 * 1000 / cycle)},
		// Two 64 KiB writes fit; each byte is acknowledged a delay after
		// it arrived (0.5 + 10 ms after it left): two writes every
		// 0.5 + 10 + 10 ms.
		{"depth 8, 128 KiB window: two writes per ACK round", 8, 128 << 10, mbs(2 * 1000 / (0.5 + 2*d))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := pipeScenario(tc.depth)
			sc.WindowBytes = tc.window
			got := runFixed(t, sc, d).WriteMBs
			t.Logf("%.2f MB/s, by hand %.2f", got, tc.want)
			if math.Abs(got-tc.want) > 0.05*tc.want {
				t.Errorf("%.2f MB/s, want %.2f ±5%%", got, tc.want)
			}
		})
	}
	// Without a delay, depth buys nothing on a disk without service time
	// beyond the network's round: the same 8× from pipelining.
	one, eight := runFixed(t, pipeScenario(1), 0).WriteMBs, runFixed(t, pipeScenario(8), 0).WriteMBs
	if r := eight / one; r < 7.5 || r > 8.5 {
		t.Errorf("undelayed depth 8 / depth 1 = %.2f, want 8 (pipelined rounds)", r)
	}
}

// TestDeepReaderKeepsItsRate: a reader behind a 50 ms path cannot reach
// its 256 KiB/s one 8 KiB read at a time (160 KB/s), and can with four
// outstanding, still paced to its rate.
func TestDeepReaderKeepsItsRate(t *testing.T) {
	for _, tc := range []struct {
		depth    int
		min, max float64 // KB/s (10^3)
	}{
		{1, 155, 165},
		{4, 256 * 1.024 * 0.97, 256 * 1.024 * 1.01},
	} {
		sc := pipeScenario(1)
		sc.ReadNetMs = 50
		sc.ReadIODepth = tc.depth
		s := runFixed(t, sc, 0)
		t.Logf("reader depth %d: %.1f kB/s", tc.depth, s.ReaderKBs)
		if s.ReaderKBs < tc.min || s.ReaderKBs > tc.max {
			t.Errorf("reader depth %d: %.1f kB/s, want %.0f to %.0f", tc.depth, s.ReaderKBs, tc.min, tc.max)
		}
	}
}

// TestDepthOneIsTheSyncPlant: depth 0 and 1 are the same scenario, bit
// for bit (the golden outputs of the existing scenarios rest on it).
func TestDepthOneIsTheSyncPlant(t *testing.T) {
	for _, name := range []string{"thesis", "randw"} {
		sc, _ := ScenarioByName(name)
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Duration = sc, 40*time.Second
		a, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Scenario.WriteIODepth, cfg.Scenario.ReadIODepth = 1, 1
		b, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Ticks) != len(b.Ticks) {
			t.Fatalf("%s: %d ticks, then %d", name, len(a.Ticks), len(b.Ticks))
		}
		for i := range a.Ticks {
			if a.Ticks[i] != b.Ticks[i] {
				t.Fatalf("%s: tick %d differs: %+v, %+v", name, i, a.Ticks[i], b.Ticks[i])
			}
		}
	}
}
