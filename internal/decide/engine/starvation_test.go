package engine

import (
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/control"
)

// fakeInFlight is the reads in flight per device, as the test sets them.
type fakeInFlight map[string]uint64

func (f fakeInFlight) ReadsInFlight(dev string) (uint64, bool) {
	n, ok := f[dev]
	return n, ok
}

// slowReader drives a reader whose every read takes readMs (longer than a
// tick) against a writer at 20 MB/s, one tick at a time: a read completes
// on the tick its time is up, and in between one read is in flight.
type slowReader struct {
	d      *disk
	f      fakeInFlight
	readMs uint64
	issued time.Duration // age of the read in flight
}

func (s *slowReader) tick(dt time.Duration, writing bool) {
	s.issued += dt
	if s.issued >= time.Duration(s.readMs)*time.Millisecond {
		s.d.io("loop0", 1, s.readMs, 0)
		s.issued = 0
	}
	s.f["loop0"] = 1
	s.d.stats["loop0"].InProgress = 1
	if writing {
		s.d.io("loop1", 0, 0, 2000)
		s.d.stats["loop1"].InProgress = 8
	} else {
		s.d.stats["loop1"].InProgress = 0
	}
}

// A reader slower than a tick leaves most ticks without a completed read,
// exactly when the disk is worst. With the reads in flight known, no tick
// may release the throttle while they wait; without (the thesis's rule),
// the decaying signal lets the controller release the writers again and
// again — which is what this test must show can fail.
func TestSlowReadsNeverReleaseTheThrottle(t *testing.T) {
	run := func(withInFlight bool) (released, throttled int) {
		// withInFlight false is the engine before the fix: no reads in
		// flight known, no hold between reads, no cap on the error, and
		// no relapse guard (which came later and slows the collapse).
		clk := clock.NewFake(time.Unix(1000, 0))
		d := newDisk("loop0", "loop1")
		s := &slowReader{d: d, f: fakeInFlight{"loop0": 0, "loop1": 0}, readMs: 350}
		cfg := DefaultConfig()
		if withInFlight {
			cfg.InFlight = s.f
		} else {
			cfg.Control.ErrCap = 0
			cfg.RulesOff = []string{"relapse"}
		}
		e := mustEngine(t, cfg, oneResource(0))
		if !withInFlight {
			e.idleHold = 0 // the thesis's rule: every tick without a read decays
			e.SetTopology(oneResource(0))
		}
		e.Step(clk.Now(), d.snap())
		// A later burst, whose delay the controller already holds: the
		// first climb, which takes no fall at all, would hide the rule
		// under test, and it protects only a run's first burst.
		e.res[0].loop.PID().SetOutput(cfg.Control.UMaxMs / 2)
		on := false
		for k := 0; k < 300; k++ {
			clk.Advance(100 * time.Millisecond)
			s.tick(100*time.Millisecond, true)
			r := e.Step(clk.Now(), d.snap()).Resources[0]
			// Released: the delay fell to under a tenth of u_max, where it
			// no longer holds these writers back (pid acts by factors, so
			// the old rule's collapse ends near its floor, not at 0).
			if r.DelayMs >= cfg.Control.UMaxMs/10 {
				throttled++
				on = true
			} else if on {
				released++
				on = false
			}
		}
		return released, throttled
	}
	rel, thr := run(true)
	if thr < 250 || rel > 0 {
		t.Errorf("with reads in flight known: throttled in %d of 300 ticks, released %d times; want ≥ 250 and never", thr, rel)
	}
	relOld, thrOld := run(false)
	if relOld == 0 {
		t.Errorf("without reads in flight the throttle was never released (%d ticks on): the test cannot tell the fix from the old rule", thrOld)
	}
	t.Logf("350 ms reads against a writer, 300 ticks: released %d times, on %d ticks (thesis rule: released %d times, on %d)", rel, thr, relOld, thrOld)
}

// Reads that never complete (a stuck disk) raise the signal by their age
// alone.
func TestPendingReadsRaiseTheSignal(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	f := fakeInFlight{"loop0": 1, "loop1": 0}
	cfg := DefaultConfig()
	cfg.InFlight = f
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	d.stats["loop0"].InProgress = 1
	var r ResourceDecision
	for k := 1; k <= 10; k++ {
		clk.Advance(100 * time.Millisecond)
		d.io("loop1", 0, 0, 2000)
		r = e.Step(clk.Now(), d.snap()).Resources[0]
		switch {
		case k == 1:
			if r.PendingMs != 0 || r.RawMs != 0 {
				t.Fatalf("tick 1: %+v; want the first sight of a read in flight to have no age yet", r)
			}
		default:
			if want := float64(k-1) * 100; r.PendingMs != want || r.RawMs != want {
				t.Fatalf("tick %d: pending %v ms, raw %v ms; want both %v (the read's proven age)", k, r.PendingMs, r.RawMs, want)
			}
		}
	}
	if r.SignalMs <= r.ThresholdMs || r.DelayMs <= 0 {
		t.Fatalf("a read stuck for 1 s: signal %v ms, delay %v ms; want over the threshold and throttling", r.SignalMs, r.DelayMs)
	}
}

// A reader that goes away entirely (nothing completes, nothing in flight)
// is not evidence of slowness: after idleHold the signal decays and the
// writers are released, as in the thesis.
func TestGoneReaderReleasesAfterIdleHold(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	f := fakeInFlight{"loop0": 0, "loop1": 0}
	cfg := DefaultConfig()
	cfg.InFlight = f
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	for range 30 {
		clk.Advance(100 * time.Millisecond)
		overload(d)
		e.Step(clk.Now(), d.snap())
	}
	held := 0
	var k int
	for k = 0; k < 600; k++ {
		clk.Advance(100 * time.Millisecond)
		d.io("loop1", 0, 0, 2000) // the writer goes on
		r := e.Step(clk.Now(), d.snap()).Resources[0]
		if r.Held {
			held++
		}
		if r.DelayMs == 0 {
			break
		}
	}
	if k == 600 {
		t.Fatal("a writer still throttled 60 s after the last read")
	}
	if want := int(control.DefaultIdleHold / (100 * time.Millisecond)); held != want-1 && held != want {
		t.Errorf("held %d ticks after the last read, want about %d (idleHold)", held, want)
	}
}

// An in-flight count that never clears is a kernel's accounting leak:
// after pendingTrustMax it is ignored and the writers are released.
func TestLeakedInFlightIsIgnored(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	f := fakeInFlight{"loop0": 1, "loop1": 0}
	cfg := DefaultConfig()
	cfg.InFlight = f
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	d.stats["loop0"].InProgress = 1
	end := clk.Now().Add(pendingTrustMax + time.Minute)
	var r ResourceDecision
	for clk.Now().Before(end) {
		clk.Advance(100 * time.Millisecond)
		d.io("loop1", 0, 0, 2000)
		r = e.Step(clk.Now(), d.snap()).Resources[0]
	}
	if r.DelayMs != 0 || r.PendingMs != 0 {
		t.Fatalf("a read 'in flight' for %v: pending %v ms, delay %v ms; want it ignored and no throttle", pendingTrustMax+time.Minute, r.PendingMs, r.DelayMs)
	}
}

// Writers the delay cannot hold raise the ceiling by raiseFactor each
// raiseAfter up to the limit, where saturation is reported; once the need
// is gone the ceiling comes back down to u_max.
func TestCeilingFollowsTheWriters(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	cfg := DefaultConfig()
	cfg.UMaxLimitMs = 100
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	var r ResourceDecision
	var ceilings []float64
	saturatedAt := -1
	for k := 0; k < 200; k++ {
		clk.Advance(100 * time.Millisecond)
		overload(d) // 50 ms reads whatever the delay: the writers need more
		r = e.Step(clk.Now(), d.snap()).Resources[0]
		if n := len(ceilings); n == 0 || ceilings[n-1] != r.UMaxMs {
			ceilings = append(ceilings, r.UMaxMs)
		}
		if r.DelayMs > r.UMaxMs+1e-9 {
			t.Fatalf("tick %d: delay %v over the ceiling %v", k, r.DelayMs, r.UMaxMs)
		}
		if r.Saturated && saturatedAt < 0 {
			saturatedAt = k
		}
		if r.Saturated && r.UMaxMs < cfg.UMaxLimitMs {
			t.Fatalf("tick %d: saturated at ceiling %v below the limit %v", k, r.UMaxMs, cfg.UMaxLimitMs)
		}
	}
	want := []float64{20, 30, 45, 67.5, 100}
	if len(ceilings) != len(want) {
		t.Fatalf("ceilings %v, want %v", ceilings, want)
	}
	for i := range want {
		if ceilings[i] != want[i] {
			t.Fatalf("ceilings %v, want %v", ceilings, want)
		}
	}
	if saturatedAt < 0 || r.UMaxLimitMs != 100 {
		t.Fatalf("never reported saturated at the limit (last %+v)", r)
	}
	// The load goes; the delay falls and, after lowerAfter each, the
	// ceiling steps back to u_max.
	for k := 0; k < 1200; k++ {
		clk.Advance(100 * time.Millisecond)
		d.io("loop0", 10, 2, 0)
		d.io("loop1", 0, 0, 2000)
		r = e.Step(clk.Now(), d.snap()).Resources[0]
		if r.Saturated && r.SignalMs <= r.TargetMs {
			t.Fatalf("saturated with the signal under the set point: %+v", r)
		}
	}
	if r.UMaxMs != cfg.Control.UMaxMs || r.DelayMs != 0 {
		t.Fatalf("after 2 min healthy: ceiling %v, delay %v; want u_max %v and 0", r.UMaxMs, r.DelayMs, cfg.Control.UMaxMs)
	}
}

// The thesis controller's clamp is part of the copied listing: its
// ceiling never moves.
func TestThesisCeilingIsFixed(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	cfg := DefaultConfig()
	cfg.Controller = "thesis"
	e := mustEngine(t, cfg, oneResource(0))
	e.Step(clk.Now(), d.snap())
	for k := 0; k < 300; k++ {
		clk.Advance(100 * time.Millisecond)
		overload(d)
		r := e.Step(clk.Now(), d.snap()).Resources[0]
		if r.UMaxMs != cfg.Control.UMaxMs || r.UMaxLimitMs != cfg.Control.UMaxMs {
			t.Fatalf("tick %d: thesis ceiling %v (limit %v), want fixed at %v", k, r.UMaxMs, r.UMaxLimitMs, cfg.Control.UMaxMs)
		}
	}
}

// How soon the ceiling first rises depends on how far over the latency
// is: twice the threshold or more, within about 0.3 s of the delay
// pressing on it; nearer, after about a second. (The bounds are numbers,
// not the constants, so that changing a constant fails here.)
func TestCeilingRisesSoonerWhenFarOver(t *testing.T) {
	for _, tc := range []struct {
		readMs uint64 // every read's latency; threshold 15 ms
		later  bool   // a later burst: the controller past its first climb
		within time.Duration
		notBy  time.Duration
	}{
		{readMs: 50, within: 500 * time.Millisecond, notBy: 0},
		{readMs: 24, within: 1300 * time.Millisecond, notBy: 800 * time.Millisecond},
		{readMs: 24, later: true, within: 1300 * time.Millisecond, notBy: 800 * time.Millisecond},
	} {
		clk := clock.NewFake(time.Unix(1000, 0))
		d := newDisk("loop0", "loop1")
		e := mustEngine(t, DefaultConfig(), oneResource(0))
		e.Step(clk.Now(), d.snap())
		pid := e.res[0].loop.PID()
		if tc.later {
			pid.SetOutput(5)
		}
		pressing := time.Duration(-1) // since the delay first pressed on the ceiling
		var rose time.Duration
		for k := 1; k <= 50 && rose == 0; k++ {
			clk.Advance(100 * time.Millisecond)
			d.io("loop0", 10, tc.readMs, 0)
			d.io("loop1", 0, 0, 2000)
			r := e.Step(clk.Now(), d.snap()).Resources[0]
			if pressing < 0 && r.DelayMs >= 0.85*r.UMaxMs {
				pressing = time.Duration(k) * 100 * time.Millisecond
				if pid.Rising() == tc.later {
					t.Fatalf("reads at %d ms (later burst %v): the controller pressed on the ceiling with Rising() %v", tc.readMs, tc.later, pid.Rising())
				}
			}
			if r.UMaxMs > 20 {
				rose = time.Duration(k)*100*time.Millisecond - pressing
			}
		}
		if pressing < 0 || rose == 0 {
			t.Fatalf("reads at %d ms: the delay never pressed on the ceiling or the ceiling never rose (pressing from %v)", tc.readMs, pressing)
		}
		if rose > tc.within || rose < tc.notBy {
			t.Errorf("reads at %d ms (later burst %v): the ceiling rose %v after the delay pressed on it, want between %v and %v", tc.readMs, tc.later, rose, tc.notBy, tc.within)
		}
	}
}
