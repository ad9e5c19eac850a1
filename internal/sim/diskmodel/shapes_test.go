package diskmodel

import (
	"math/rand"
	"testing"
	"time"
)

// raid is a RAID-6 of four spindles (two data units a row) without
// rotation or seek: every operation costs 0.5 ms plus its transfer at
// 64 KiB a millisecond, so each case is computed by hand.
func raid() Profile {
	p := plain()
	p.Spindles, p.ParityDisks = 4, 2
	p.AvgSeekMs, p.TrackToTrackMs = 0, 0
	return p
}

func TestRAIDLayout(t *testing.T) {
	p, _ := ProfileByName("raid6-hdd")
	for _, tc := range []struct {
		row, unit           int64
		spindle, parA, parB int
	}{
		{0, 0, 1, 7, 0}, // row 0: parity on 7 and 0, data from 1
		{0, 5, 6, 7, 0},
		{1, 0, 0, 6, 7}, // parity rotates down by one a row
		{1, 5, 5, 6, 7},
		{7, 0, 2, 0, 1},
		{8, 0, 1, 7, 0}, // and repeats every 8 rows
	} {
		s, a, b := p.raidLayout(tc.row, tc.unit)
		if s != tc.spindle || a != tc.parA || b != tc.parB {
			t.Errorf("row %d unit %d: spindle %d, parity %d and %d; want %d, %d and %d", tc.row, tc.unit, s, a, b, tc.spindle, tc.parA, tc.parB)
		}
	}
	if got := p.Capacity(); got != 6*4e12 {
		t.Errorf("capacity %d, want the six data disks' %d", got, int64(6*4e12))
	}
}

func TestRAIDWrites(t *testing.T) {
	for _, tc := range []struct {
		name           string
		op             Op
		off, n         int64
		want           time.Duration
		full, rmwUnits int64
		ops            int64
	}{
		// Row 0: parity on spindles 3 and 0, data units on 1 and 2.
		{"small write: read and rewrite data and both parities, in parallel",
			Write, 0, 8 << 10, msd(2 * (0.5 + 0.125)), 0, 1, 6},
		{"full row: four units written at once, nothing read",
			Write, 0, 128 << 10, msd(0.5 + 1), 1, 0, 4},
		{"read of a row: its two data units in parallel",
			Read, 0, 128 << 10, msd(0.5 + 1), 0, 0, 2},
		{"most of a row: 64 KiB and 32 KiB pieces, parity over 64 KiB once",
			Write, 0, 96 << 10, msd(2 * (0.5 + 1)), 0, 2, 8},
		{"a row and a piece of the next: one full stripe and one RMW",
			// Row 1's parity is on 2 and 3, its unit 0 on spindle 0,
			// which the full row's write keeps busy until 1.5 ms.
			Write, 0, 136 << 10, msd(0.5 + 1 + 2*(0.5+0.125)), 1, 1, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(raid(), 1)
			near(t, tc.name, a.Submit(t0, tc.op, tc.off, tc.n, 1), tc.want)
			s := a.Stats()
			if s.FullStripeWrites != tc.full || s.RMWWrites != tc.rmwUnits || s.Ops != tc.ops {
				t.Errorf("full stripes %d, RMW pieces %d, spindle operations %d; want %d, %d, %d",
					s.FullStripeWrites, s.RMWWrites, s.Ops, tc.full, tc.rmwUnits, tc.ops)
			}
		})
	}
}

func TestRMWWaitsARevolution(t *testing.T) {
	p := raid()
	p.RPM = 10000 // 6 ms a revolution
	// The data spindle's read and the parity spindles' reads each draw
	// their rotation; whatever they draw, each rewrite ends exactly one
	// revolution after its read, so the write ends between 6 ms plus the
	// read's fixed part and 6 ms plus a whole revolution of waiting more.
	a := New(p, 3)
	got := a.Submit(t0, Write, 0, 8<<10, 1).Sub(t0)
	lo, hi := msd(0.625+6), msd(0.625+6+6)
	if got < lo || got >= hi {
		t.Errorf("small RMW write took %v, want in [%v, %v)", got, lo, hi)
	}
	if busy := a.Stats().SpindleBusySum; busy < 3*msd(6.625) {
		t.Errorf("three spindles busy %v in all, want each at least read + a revolution", busy)
	}
}

// lazy is a two-spindle RAID 0 with a 128 KiB cache destaged in the
// background one write at a time.
func lazy() Profile {
	p := plain()
	p.AvgSeekMs, p.TrackToTrackMs = 0, 0
	p.CacheBytes, p.CacheAckMs = 128<<10, 0.1
	p.DestageDepth, p.CoalesceBytes = 1, 128<<10
	return p
}

func TestBackgroundDestage(t *testing.T) {
	a := New(lazy(), 1)
	// A goes to spindle 0 at once (0.5 + 1 ms); B waits in the cache.
	near(t, "A acked", a.Submit(t0, Write, 0, 64<<10, 1), msd(0.1))
	near(t, "B acked", a.Submit(t0, Write, 64<<10, 64<<10, 1), msd(0.1))
	// C finds the cache full: A's destage ends at 1.5 ms, B's starts
	// then (spindle 1, until 3 ms), and C fits.
	near(t, "C waits for A's destage", a.Submit(t0, Write, 128<<10, 64<<10, 1), msd(1.5+0.1))
	// A read on spindle 0 waits for A's destage only, not for C's (which
	// starts when B's ends, at 3 ms): local 64 KiB, 8 KiB.
	near(t, "read behind the destage in progress", a.Submit(t0, Read, 2*64<<10, 8<<10, 2), msd(1.5+0.5+0.125))
	if s := a.Stats(); s.Destages != 2 || s.CacheWaits != 1 {
		t.Errorf("destages %d, cache waits %d; want 2 and 1", s.Destages, s.CacheWaits)
	}
}

func TestBackgroundDestageCoalesces(t *testing.T) {
	p := lazy()
	p.CacheBytes = 1 << 20
	a := New(p, 1)
	for i := range int64(3) {
		a.Submit(t0, Write, i*64<<10, 64<<10, 1)
	}
	// The first starts alone; the two that follow it contiguously go as
	// one 128 KiB destage when it ends at 1.5 ms, over both spindles:
	// done at 3 ms, when a read of spindle 1 at 2 ms can start.
	near(t, "read after the merged destage", a.Submit(t0.Add(msd(2)), Read, 3*64<<10, 8<<10, 2), msd(3+0.5+0.125))
	if s := a.Stats(); s.Destages != 2 {
		t.Errorf("%d destages, want 2 (the last two merged)", s.Destages)
	}
}

func capped() Profile {
	p := plain()
	p.AvgSeekMs, p.TrackToTrackMs = 0, 0
	p.QueueDepth = 8 // no queueing at the spindles: only the caps
	return p
}

func TestTokenBuckets(t *testing.T) {
	const read4k = 0.5 + 0.0625 // ms
	for _, tc := range []struct {
		name string
		edit func(*Profile)
		reqs []int64 // sizes, all submitted at t0 at different offsets
		want []float64
	}{
		{"1000 IOPS, burst 2: two at once, then one a millisecond",
			func(p *Profile) { p.IOPSCap, p.IOPSBurst = 1000, 2 },
			[]int64{4 << 10, 4 << 10, 4 << 10, 4 << 10}, []float64{read4k, read4k, 1 + read4k, 2 + read4k}},
		{"64 KiB/ms, burst 64 KiB: the second 64 KiB a millisecond later",
			func(p *Profile) { p.ThroughputCapMBs, p.ThroughputBurstBytes = 65.536, 64<<10 },
			[]int64{64 << 10, 64 << 10}, []float64{1.5, 2.5}},
		{"16 KiB units: 64 KiB counts 4 of a burst of 4; the next waits for 1 token",
			func(p *Profile) { p.IOPSCap, p.IOPSBurst, p.IOUnitBytes = 1000, 4, 16<<10 },
			[]int64{64 << 10, 4 << 10}, []float64{1.5, 1 + read4k}},
		{"burst 128 KiB: a 128 KiB read empties it; 64 KiB then waits 1 ms, 4 KiB 1/16 ms more",
			func(p *Profile) { p.ThroughputCapMBs, p.ThroughputBurstBytes = 65.536, 128<<10 },
			[]int64{128 << 10, 64 << 10, 4 << 10}, []float64{0.5 + 1, 1 + 1.5, 1.0625 + read4k}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := capped()
			tc.edit(&p)
			a := New(p, 1)
			for i, n := range tc.reqs {
				near(t, tc.name, a.Submit(t0, Read, int64(i)*256<<10, n, 1), msd(tc.want[i]))
			}
		})
	}
}

// run drives an array with depth requests outstanding (issued again the
// moment one completes, as a closed loop of threads) for d, and returns
// the completions per second, the bytes per second and the mean latency.
func run(a *Array, depth int, d time.Duration, op Op, size int64, random bool, seed int64) (iops, mbs, meanMs float64) {
	rng := rand.New(rand.NewSource(seed))
	span := a.Capacity() / 4
	var pos int64
	next := func() int64 {
		if random {
			return rng.Int63n(span/size) * size
		}
		pos += size
		return pos - size
	}
	h := make([]time.Time, depth)
	for i := range h {
		h[i] = t0
	}
	var n int
	var lat time.Duration
	end := t0.Add(d)
	for {
		// The earliest free thread issues next.
		k := 0
		for i := range h {
			if h[i].Before(h[k]) {
				k = i
			}
		}
		if !h[k].Before(end) {
			break
		}
		done := a.Submit(h[k], op, next(), size, uint64(k))
		lat += done.Sub(h[k])
		h[k] = done
		n++
	}
	secs := d.Seconds()
	return float64(n) / secs, float64(n) * float64(size) / secs / 1e6, float64(lat) / float64(n) / float64(time.Millisecond)
}

func TestCloudCalibration(t *testing.T) {
	p, _ := ProfileByName("cloud-3000")
	for _, tc := range []struct {
		name             string
		depth            int
		op               Op
		size             int64
		iops, mbs, latMs [2]float64 // ranges; zero: not checked
	}{
		{"one 4 KiB reader waits the floor", 1, Read, 4 << 10, [2]float64{1100, 1300}, [2]float64{}, [2]float64{0.78, 0.85}},
		{"one 4 KiB writer pays the write floor", 1, Write, 4 << 10, [2]float64{900, 1100}, [2]float64{}, [2]float64{0.98, 1.05}},
		{"32 deep 4 KiB reads hit the IOPS cap; Little's latency", 32, Read, 4 << 10, [2]float64{2990, 3060}, [2]float64{}, [2]float64{10.2, 11.2}},
		{"8 deep 1 MiB writes hit the throughput cap", 8, Write, 1 << 20, [2]float64{}, [2]float64{124, 128}, [2]float64{60, 70}},
		{"256 KiB reads: the byte cap before the IOPS cap", 16, Read, 256 << 10, [2]float64{470, 490}, [2]float64{124, 128}, [2]float64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iops, mbs, lat := run(New(p, 1), tc.depth, 20*time.Second, tc.op, tc.size, true, 2)
			t.Logf("%.0f IOPS, %.1f MB/s, mean %.2f ms", iops, mbs, lat)
			check := func(what string, v float64, r [2]float64) {
				if r != [2]float64{} && (v < r[0] || v > r[1]) {
					t.Errorf("%s %.2f, want %.2f to %.2f", what, v, r[0], r[1])
				}
			}
			check("IOPS", iops, tc.iops)
			check("MB/s", mbs, tc.mbs)
			check("latency ms", lat, tc.latMs)
		})
	}
}

func TestRAID6Calibration(t *testing.T) {
	p, _ := ProfileByName("raid6-hdd")
	// A random 8 KiB read alone: command, seek and half a revolution
	// (0.5 + 8.5 + 4.2 ms) and the transfer.
	a := New(p, 1)
	var sum time.Duration
	for i := range 200 {
		at := t0.Add(time.Duration(i) * time.Second)
		sum += a.Submit(at, Read, rand.New(rand.NewSource(int64(i))).Int63n(p.Capacity()/8192)*8192, 8<<10, 1).Sub(at)
	}
	if m := float64(sum) / 200 / float64(time.Millisecond); m < 11 || m > 15.5 {
		t.Errorf("random 8 KiB read alone %.1f ms, want about 13", m)
	}

	// The cache absorbs small random writes at its acknowledgement...
	iops, _, lat := run(New(p, 1), 16, 2*time.Second, Write, 4<<10, true, 3)
	t.Logf("random 4 KiB writes, first 2 s: %.0f IOPS, mean %.2f ms", iops, lat)
	if lat > 0.2 {
		t.Errorf("writes into an empty 1 GiB cache took %.2f ms on average, want the 0.1 ms acknowledgement", lat)
	}
	// ... until it is full; then they run at the read-modify-write rate.
	// Each 4 KiB write is three spindles' read and rewrite (0.5 + 8.5 +
	// 4.2 + 8.3 ms ≈ 21.5 ms each), eight spindles: about 8/3/21.5 ms ≈
	// 125 writes a second. 1 GiB at that rate takes hours, so the test
	// starts from a small cache to reach the steady state.
	small := p
	small.CacheBytes = 4 << 20
	iops, mbs, lat := run(New(small, 1), 16, 60*time.Second, Write, 4<<10, true, 3)
	t.Logf("random 4 KiB writes, cache full: %.0f IOPS (%.2f MB/s), mean %.0f ms", iops, mbs, lat)
	if iops < 100 || iops > 170 {
		t.Errorf("steady random 4 KiB writes %.0f IOPS, want the RMW rate, about 125", iops)
	}
	// Sequential 1 MiB writes merge into whole rows: the six data disks'
	// media rate (6 × 180 MB/s), less the positioning between rows.
	_, mbs, _ = run(New(small, 1), 8, 20*time.Second, Write, 1<<20, false, 3)
	t.Logf("sequential 1 MiB writes, cache full: %.0f MB/s", mbs)
	if mbs < 400 || mbs > 1080 {
		t.Errorf("sequential writes %.0f MB/s, want whole stripes (400 to 1080)", mbs)
	}
	if s := New(small, 1).Stats(); s.RMWWrites != 0 {
		t.Error("a new array has counters")
	}
}
