package engine

import (
	"math"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/observe/latency"
)

// fineTick is one device's tick of the block-layer probe.
type fineTick struct {
	ops      latency.Ops
	oldest   time.Duration
	inFlight int
}

// fakeFine is a block-layer probe's tick per device, as the test sets it.
type fakeFine map[string]fineTick

func (f fakeFine) TickReads(dev string) (latency.Ops, time.Duration, int, bool) {
	x, ok := f[dev]
	return x.ops, x.oldest, x.inFlight, ok
}

func opsOf(lat ...time.Duration) latency.Ops {
	var o latency.Ops
	for _, l := range lat {
		o.Count++
		o.Sum += l
		o.Hist.Add(l)
	}
	return o
}

// With the probe, the signal is taken in microseconds from its
// histograms: the mean, or a percentile when the resource asks for one;
// without the probe for a device, from /proc/diskstats, and a percentile
// signal falls back to the mean.
func TestFineSignal(t *testing.T) {
	// 100 reads: 90 at 200 µs, 10 at 2 ms. Mean 0.38 ms, p95 ≈ 2 ms;
	// diskstats would see whole milliseconds only.
	var lats []time.Duration
	for i := range 100 {
		if i < 90 {
			lats = append(lats, 200*time.Microsecond)
		} else {
			lats = append(lats, 2*time.Millisecond)
		}
	}
	tick := opsOf(lats...)
	for _, tc := range []struct {
		name, signal string
		probed       bool
		wantRaw      float64
		tol          float64
		wantSource   string
	}{
		{"mean from the probe", SignalMean, true, 0.38, 0.001, SourceEBPF},
		{"p95 from the probe", SignalP95, true, 2.0, 2.0 * 0.0625, SourceEBPF},
		{"p99 from the probe", SignalP99, true, 2.0, 2.0 * 0.0625, SourceEBPF},
		{"p95 without the probe falls back to the mean", SignalP95, false, 0.0, 0, SourceDiskstats},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1000, 0))
			d := newDisk("loop0", "loop1")
			f := fakeFine{}
			cfg := DefaultConfig()
			cfg.Signal = tc.signal
			cfg.Fine = f
			cfg.ThresholdMs = 0.5
			e := mustEngine(t, cfg, oneResource(0))
			e.Step(clk.Now(), d.snap())
			clk.Advance(100 * time.Millisecond)
			// diskstats: 100 reads and 38 ms (whole ms: the kernel's count)
			d.stats["loop0"].ReadIOs += 100
			d.stats["loop0"].ReadTicks += 38
			if tc.probed {
				f["loop0"] = fineTick{tick, 0, 0}
				f["loop1"] = fineTick{latency.Ops{}, 0, 0}
			}
			r := e.Step(clk.Now(), d.snap()).Resources[0]
			want := tc.wantRaw
			if !tc.probed {
				want = 0.38 // 38 ms / 100 reads from diskstats
			}
			if math.Abs(r.RawMs-want) > tc.tol+1e-9 || r.Source != tc.wantSource || r.Signal != tc.signal {
				t.Fatalf("raw %v ms from %s (%s), want %v ± %v from %s", r.RawMs, r.Source, r.Signal, want, tc.tol, tc.wantSource)
			}
			if tc.probed && (math.Abs(r.MeanMs-0.38) > 0.001 || r.P95Ms < 1.8 || r.P99Ms < 1.8) {
				t.Errorf("tick statistics mean %v p95 %v p99 %v, want 0.38, ≈2, ≈2", r.MeanMs, r.P95Ms, r.P99Ms)
			}
		})
	}
}

// The probe knows each read's issue time: a read in flight with nothing
// completed counts by its age at once, without the tick of proof that
// /proc/diskstats needs.
func TestFinePendingReadCountsAtOnce(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	f := fakeFine{}
	cfg := DefaultConfig()
	cfg.Fine = f
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	// A tick in which the probe counts reads: it is trusted for loop0.
	clk.Advance(100 * time.Millisecond)
	f["loop0"] = fineTick{opsOf(5 * time.Millisecond), 0, 0}
	d.io("loop0", 1, 5, 0)
	e.Step(clk.Now(), d.snap())
	clk.Advance(100 * time.Millisecond)
	f["loop0"] = fineTick{latency.Ops{}, 80 * time.Millisecond, 1}
	d.stats["loop0"].InProgress = 1
	r := e.Step(clk.Now(), d.snap()).Resources[0]
	if r.Held || math.Abs(r.RawMs-80) > 1e-9 || r.PendingMs != 80 {
		t.Fatalf("%+v: want the 80 ms read in flight counted at once (raw 80, not held)", r)
	}
}

// A resource's own signal overrides the default, and a bad one is refused.
func TestResourceSignal(t *testing.T) {
	topo := oneResource(0)
	topo.Resources[0].Signal = SignalP99
	e := mustEngine(t, DefaultConfig(), topo)
	if got := e.Step(time.Unix(1, 0), nil).Resources[0].Signal; got != SignalP99 {
		t.Fatalf("signal %q, want the resource's p99", got)
	}
	topo.Resources[0].Signal = "median"
	if _, err := New(DefaultConfig(), topo); err == nil {
		t.Fatal("a resource signal \"median\" was accepted")
	}
	cfg := DefaultConfig()
	cfg.Signal = "p50"
	if _, err := New(cfg, oneResource(0)); err == nil {
		t.Fatal("signal \"p50\" was accepted")
	}
}

// The block tracepoints see only request-based queues: on a bio-based
// device (device-mapper, LVM, md) the probe counts nothing while
// diskstats counts the reads. Such a device is measured from diskstats,
// as the kernel lab found on LVM over dm-delay.
func TestFineFallsBackOnBioBasedDevices(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	f := fakeFine{"loop0": {}, "loop1": {}} // probed, never a read
	cfg := DefaultConfig()
	cfg.Fine = f
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	var r ResourceDecision
	for range 10 {
		clk.Advance(100 * time.Millisecond)
		overload(d) // diskstats: 10 reads of 50 ms on loop0
		r = e.Step(clk.Now(), d.snap()).Resources[0]
	}
	if r.Source != SourceDiskstats || r.RawMs != 50 || r.DelayMs <= 0 {
		t.Fatalf("%+v: want the reads measured from diskstats (50 ms) and the writer throttled", r)
	}
}

// TestProbePendingNeedsTheKernelsWord: the probe's oldest read in flight
// counts only while the kernel's own count (sysfs inflight) has as many
// reads in flight on the device as the probe holds, or cannot be read.
// Found in the lab: a probe slot that was not freed aged for seconds
// while every read completed in under a millisecond, and the writers
// were throttled for it; and in fig5.11, stale slots beside the reader's
// one real read in flight, each kicking the delay and its ceiling up
// (docs/results.md, fig5.11).
func TestProbePendingNeedsTheKernelsWord(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inFlight fakeInFlight // nil: no sysfs
		probe    int          // reads the probe holds in flight
		pending  bool
	}{
		{"the kernel counts the probe's read in flight", fakeInFlight{"loop0": 1}, 1, true},
		{"the kernel counts both of the probe's reads", fakeInFlight{"loop0": 2}, 2, true},
		{"the kernel counts none: a stale slot", fakeInFlight{"loop0": 0}, 1, false},
		{"the kernel counts one of two: a stale slot beside a read", fakeInFlight{"loop0": 1}, 2, false},
		{"the kernel's count cannot be read", fakeInFlight{}, 1, true},
		{"no sysfs at all", nil, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.NewFake(time.Unix(1000, 0))
			d := newDisk("loop0", "loop1")
			f := fakeFine{}
			cfg := DefaultConfig()
			cfg.Signal = SignalP95
			cfg.Fine = f
			cfg.ThresholdMs = 1
			if tc.inFlight != nil {
				cfg.InFlight = tc.inFlight
			}
			e := mustEngine(t, cfg, oneResource(0))
			e.Step(clk.Now(), d.snap())
			clk.Advance(100 * time.Millisecond)
			d.stats["loop0"].ReadIOs += 3
			d.stats["loop0"].ReadTicks += 1
			f["loop0"] = fineTick{opsOf(400*time.Microsecond, 400*time.Microsecond, 500*time.Microsecond), 500 * time.Millisecond, tc.probe}
			f["loop1"] = fineTick{latency.Ops{}, 0, 0}
			r := e.Step(clk.Now(), d.snap()).Resources[0]
			if got := r.PendingMs > 0; got != tc.pending {
				t.Errorf("pending %v (raw %.2f ms, pending %.1f ms), want %v", got, r.RawMs, r.PendingMs, tc.pending)
			}
			if !tc.pending && r.RawMs > 1 {
				t.Errorf("raw %.2f ms: a stale slot reached the signal", r.RawMs)
			}
		})
	}
}
