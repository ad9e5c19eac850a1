package diskmodel

import (
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// plain is a profile without randomness: no rotation, so every service time
// can be computed by hand.
func plain() Profile {
	return Profile{
		Name: "plain", Spindles: 2, StripeBytes: 64 << 10, DiskBytes: 1e9,
		AvgSeekMs: 4, TrackToTrackMs: 1, TransferMBs: 65.536, // 64 KiB in 1 ms
		CommandOverheadMs: 0.5, QueueDepth: 1,
	}
}

func msd(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func near(t *testing.T, what string, got time.Time, want time.Duration) {
	t.Helper()
	d := got.Sub(t0) - want
	if d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("%s: completes at +%v, want +%v", what, got.Sub(t0), want)
	}
}

func TestServiceTimes(t *testing.T) {
	p := plain()
	full := 1 + (4-1)/meanSqrtRandomDistance // full-stroke seek, ms
	tests := []struct {
		name string
		run  func(a *Array) time.Time
		want time.Duration
	}{
		{"first read at offset 0 is sequential to head 0: overhead + transfer",
			func(a *Array) time.Time { return a.Submit(t0, Read, 0, 64<<10, 1) }, msd(0.5 + 1)},
		{"read a quarter disk away on spindle 0: sqrt seek",
			func(a *Array) time.Time {
				// spindle-local 250 MB = stripe unit 250e6/64Ki*2 on the array.
				local := int64(250e6) / p.StripeBytes * p.StripeBytes
				off := local / p.StripeBytes * 2 * p.StripeBytes
				f := float64(local) / 1e9
				got := a.Submit(t0, Read, off, 64<<10, 1)
				want := msd(0.5 + 1 + (full-1)*sqrt(f) + 1)
				near(t, "seek", got, want)
				return got
			}, -1},
		{"two reads on one spindle queue FIFO",
			func(a *Array) time.Time {
				a.Submit(t0, Read, 0, 64<<10, 1)
				// Unit 2 is spindle 0 again, local offset 64 KiB: sequential to
				// the first and back to back, so no seek.
				return a.Submit(t0, Read, 2*64<<10, 64<<10, 2)
			}, msd(1.5 + 1.5)},
		{"a 128 KiB read spans both spindles in parallel",
			func(a *Array) time.Time { return a.Submit(t0, Read, 0, 128<<10, 1) }, msd(1.5)},
		{"a non-sequential read pays track-to-track at least",
			func(a *Array) time.Time { return a.Submit(t0, Read, 4*64<<10, 8<<10, 1) },
			msd(0.5 + 1 + (full-1)*sqrt(float64(2*64<<10)/1e9) + 0.125)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.run(New(p, 1))
			if tc.want >= 0 {
				near(t, tc.name, got, tc.want)
			}
		})
	}
}

func sqrt(f float64) float64 {
	// Newton's method keeps the test independent of the code's math.Sqrt use.
	x := f
	if x == 0 {
		return 0
	}
	for range 60 {
		x = (x + f/x) / 2
	}
	return x
}

func TestSharedBusSerialisesTransfers(t *testing.T) {
	p := plain()
	p.BusMBs = 65.536 / 2 // 64 KiB takes 2 ms on the bus, slower than the media
	a := New(p, 1)
	first := a.Submit(t0, Read, 0, 64<<10, 1)       // spindle 0
	second := a.Submit(t0, Read, 64<<10, 64<<10, 2) // spindle 1, same instant
	near(t, "first", first, msd(0.5+2))
	// Spindle 1 is positioned at 0.5 ms too but the bus is busy until 2.5 ms.
	// (Its head at 0 and its offset 0: sequential.)
	near(t, "second", second, msd(2.5+2))
}

func TestWriteBackCacheAcksAndWaitsForDestage(t *testing.T) {
	p := plain()
	p.CacheBytes = 64 << 10
	p.CacheAckMs = 0.1
	a := New(p, 1)
	ack1 := a.Submit(t0, Write, 0, 64<<10, 1)
	near(t, "first write acked from cache", ack1, msd(0.1))
	// The cache is full until the first destage ends at 1.5 ms.
	ack2 := a.Submit(t0, Write, 64<<10, 64<<10, 1)
	near(t, "second write waits for the destage", ack2, msd(1.5+0.1))
	// A read on spindle 0 queues behind the first destage (ends 1.5 ms);
	// local offset 64 KiB is sequential to it and back to back.
	r := a.Submit(t0, Read, 2*64<<10, 8<<10, 2)
	near(t, "read behind destage", r, msd(1.5+0.5+0.125))
	if s := a.Stats(); s.CacheWaits != 1 || s.Writes != 2 || s.Reads != 1 {
		t.Errorf("stats = %+v, want 1 cache wait, 2 writes, 1 read", s)
	}
}

func TestRAMHasNoLatency(t *testing.T) {
	p, err := ProfileByName("ram")
	if err != nil {
		t.Fatal(err)
	}
	a := New(p, 1)
	for i := range 100 {
		now := t0.Add(time.Duration(i) * time.Microsecond)
		if got := a.Submit(now, Op(i%2), int64(i)<<20, 1<<20, 1); !got.Equal(now) {
			t.Fatalf("ram request completed at %v, want %v", got, now)
		}
	}
}

func TestProfilesAreValid(t *testing.T) {
	for _, n := range Profiles() {
		p, err := ProfileByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
	}
	if _, err := ProfileByName("floppy"); err == nil {
		t.Error("unknown profile accepted")
	}
	bad := plain()
	bad.Spindles = 0
	if bad.Validate() == nil {
		t.Error("profile with 0 spindles accepted")
	}
}

func TestSSDIsFastAndParallel(t *testing.T) {
	p, _ := ProfileByName("ssd")
	a := New(p, 1)
	r := a.Submit(t0, Read, 123<<20, 4<<10, 1).Sub(t0)
	if r < 50*time.Microsecond || r > 200*time.Microsecond {
		t.Errorf("ssd 4 KiB read took %v, want about 0.1 ms", r)
	}
	// 32 random 4 KiB reads at once complete far sooner than 32 in a row.
	b := New(p, 1)
	var last time.Time
	for i := range 32 {
		if c := b.Submit(t0, Read, int64(i)*977*4096, 4<<10, 1); c.After(last) {
			last = c
		}
	}
	if last.Sub(t0) > 8*r {
		t.Errorf("32 parallel reads took %v, single read %v: no parallelism", last.Sub(t0), r)
	}
	// Large sequential read runs near the link rate (~500 MB/s).
	c := New(p, 1)
	done := c.Submit(t0, Read, 0, 64<<20, 1)
	mbs := 64 * 1.048576 / done.Sub(t0).Seconds()
	if mbs < 400 || mbs > 560 {
		t.Errorf("ssd sequential read %.0f MB/s, want about 500", mbs)
	}
}

func TestDeterministicAndConcurrencySafe(t *testing.T) {
	p, _ := ProfileByName("thesis-2010")
	run := func() []time.Time {
		a := New(p, 42)
		var out []time.Time
		for i := range 200 {
			out = append(out, a.Submit(t0.Add(time.Duration(i)*time.Millisecond), Op(i%2), int64(i*7919)<<13, 8<<10, uint64(i%3)))
		}
		return out
	}
	x, y := run(), run()
	for i := range x {
		if !x[i].Equal(y[i]) {
			t.Fatalf("request %d: %v then %v with the same seed", i, x[i], y[i])
		}
	}
	a := New(p, 1)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				now := time.Now()
				if c := a.Submit(now, Op(i%2), int64(g<<30+i<<16), 64<<10, uint64(g)); c.Before(now) {
					t.Errorf("completion %v before submission %v", c, now)
				}
			}
		}()
	}
	wg.Wait()
	if s := a.Stats(); s.Reads+s.Writes != 1600 {
		t.Errorf("counted %d requests, want 1600", s.Reads+s.Writes)
	}
}

func TestQueueDepthOverlapsOperations(t *testing.T) {
	p := plain()
	p.AvgSeekMs, p.TrackToTrackMs = 0, 0 // service = 0.5 + 1 ms, whatever the offset
	p.Spindles = 1
	p.QueueDepth = 2
	a := New(p, 1)
	var got []time.Time
	for i := range 3 {
		got = append(got, a.Submit(t0, Read, int64(i)*(64<<10), 64<<10, 1))
	}
	near(t, "first slot", got[0], msd(1.5))
	near(t, "second slot, in parallel", got[1], msd(1.5))
	near(t, "third waits for a slot", got[2], msd(3))
}

func TestRotationalLatencyIsUniformOverARevolution(t *testing.T) {
	p := plain()
	p.AvgSeekMs, p.TrackToTrackMs = 0, 0
	p.RPM = 10000 // 6 ms a revolution
	a := New(p, 7)
	var sum float64
	const n = 4000
	now := t0
	for i := range n {
		// Far apart in time and never sequential: every read waits for
		// the platter.
		now = now.Add(time.Second)
		lat := a.Submit(now, Read, int64(2*i+1)*(128<<10), 64<<10, 1).Sub(now)
		rot := float64(lat-msd(1.5)) / float64(time.Millisecond)
		if rot < 0 || rot >= 6 {
			t.Fatalf("rotational latency %.3f ms outside [0, 6)", rot)
		}
		sum += rot
	}
	if mean := sum / n; mean < 2.8 || mean > 3.2 {
		t.Errorf("mean rotational latency %.2f ms, want about 3 (half a revolution)", mean)
	}
}
