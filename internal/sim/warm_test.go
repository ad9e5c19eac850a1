package sim

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestWarmCache holds the plant's warm start (Scenario.WarmCacheBytes)
// to what it is for: on raid6-hdd, uncontrolled random writers that
// start against an empty 1 GiB cache are acknowledged at line rate,
// against a full one at the array's destage rate from their first
// second; the reader alone before them sees the same array either way
// (the cache is filled when the writers start).
func TestWarmCache(t *testing.T) {
	c := Cell{Disk: "raid6-hdd", Writers: Writers{Random: true, Bytes: 16 << 10, Threads: 3, IODepth: 32}, ThresholdMs: 30}
	type first struct {
		writeMBs, readMs float64 // the writers' first 5 s
		alone            []float64
	}
	runWith := func(warm bool) first {
		sc, err := MatrixOptions{ColdCache: !warm}.scenario(c, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := sc.WarmCacheBytes > 0; got != warm {
			t.Fatalf("warm %v: the matrix's scenario has WarmCacheBytes %d", warm, sc.WarmCacheBytes)
		}
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Controller, cfg.Duration = sc, "none", 15*time.Second
		r, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var f first
		var n float64
		for _, s := range r.Seconds {
			switch {
			case s.T <= sc.Start.Seconds():
				f.alone = append(f.alone, s.ReadMs)
			case s.T <= sc.Start.Seconds()+5:
				f.writeMBs += s.WriteMBs / 5
				if !math.IsNaN(s.ReadMs) {
					f.readMs += s.ReadMs
					n++
				}
			}
		}
		f.readMs /= n
		return f
	}
	cold, warm := runWith(false), runWith(true)
	t.Logf("writers' first 5 s: cold %.1f MB/s, reader %.1f ms; warm %.1f MB/s, reader %.1f ms", cold.writeMBs, cold.readMs, warm.writeMBs, warm.readMs)
	if cold.writeMBs < 100 {
		t.Errorf("cold: writers %.1f MB/s into an empty 1 GiB cache, want line rate (over 100)", cold.writeMBs)
	}
	if warm.writeMBs > 10 {
		t.Errorf("warm: writers %.1f MB/s into a full cache, want the destage rate (a few MB/s)", warm.writeMBs)
	}
	if warm.readMs <= cold.readMs {
		t.Errorf("warm: the reader waits %.1f ms behind a full cache, no more than behind an empty one (%.1f)", warm.readMs, cold.readMs)
	}
	for i := range cold.alone {
		if a, b := cold.alone[i], warm.alone[i]; a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
			t.Errorf("second %d, reader alone: cold %.3f ms, warm %.3f; want the same array before the writers start", i+1, a, b)
		}
	}

	sc, _ := MatrixScenario(c, 0)
	sc.WarmCacheBytes = sc.Disk.CacheBytes + 1
	cfg := DefaultConfig()
	cfg.Scenario, cfg.Duration = sc, time.Second
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "warm cache") {
		t.Errorf("a warm cache larger than the disk's: error %v, want one naming the warm cache", err)
	}
}
