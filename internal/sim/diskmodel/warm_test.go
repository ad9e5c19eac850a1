package diskmodel

import (
	"math/rand"
	"testing"
	"time"
)

func TestPrefill(t *testing.T) {
	eager := plain()
	eager.CacheBytes, eager.CacheAckMs = 128<<10, 0.1
	through := lazy()
	through.CacheBytes, through.DestageDepth = 0, 0
	for _, tc := range []struct {
		name    string
		p       Profile
		prefill []int64 // 64 KiB pieces at these offsets, at t0
		fits    int     // how many of them Prefill takes
		op      Op
		off     int64
		want    time.Duration // the request's completion (a write's ack)
	}{
		{"cold: a write is acknowledged at once", lazy(), nil, 0, Write, 1 << 20, msd(0.1)},
		// The first piece destages at once (spindle 0, until 1.5 ms), the
		// second waits in the cache, which is full: the write waits for
		// the first destage.
		{"warm: a write waits for a destage to make room", lazy(), []int64{0, 64 << 10}, 2, Write, 1 << 20, msd(1.5 + 0.1)},
		{"cold: a read goes to the media at once", lazy(), nil, 0, Read, 2 * 64 << 10, msd(0.5 + 0.125)},
		// Spindle 0, local 64 KiB: behind the prefilled destage.
		{"warm: a read waits behind the destage in progress", lazy(), []int64{0}, 1, Read, 2 * 64 << 10, msd(1.5 + 0.5 + 0.125)},
		{"a prefill that does not fit is refused", lazy(), []int64{0, 64 << 10, 128 << 10}, 2, Write, 1 << 20, msd(1.5 + 0.1)},
		{"without a cache nothing is prefilled", through, []int64{0}, 0, Write, 1 << 20, msd(0.5 + 1)},
		// Without background destage the piece is queued at spindle 0 at
		// once; the read follows it sequentially (no seek).
		{"eager destage: a read waits behind it", eager, []int64{0}, 1, Read, 2 * 64 << 10, msd(1.5 + 0.5 + 0.125)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.p, 1)
			took := 0
			for _, off := range tc.prefill {
				if a.Prefill(t0, off, 64<<10) {
					took++
				}
			}
			if took != tc.fits {
				t.Fatalf("prefill took %d pieces, want %d", took, tc.fits)
			}
			if got, want := a.Dirty(t0), int64(tc.fits)*64<<10; tc.p.CacheBytes > 0 && got != want {
				t.Errorf("dirty %d bytes after the prefill, want %d", got, want)
			}
			n := int64(64 << 10)
			if tc.op == Read {
				n = 8 << 10
			}
			near(t, tc.name, a.Submit(t0, tc.op, tc.off, n, 1), tc.want)
			if s := a.Stats(); s.Writes+s.Reads != 1 {
				t.Errorf("stats count %d writes and %d reads, want only the request (a prefill is not a write)", s.Writes, s.Reads)
			}
		})
	}
}

func TestPrefillDestagesToEmpty(t *testing.T) {
	a := New(lazy(), 1)
	if !a.Prefill(t0, 0, 64<<10) || !a.Prefill(t0, 64<<10, 64<<10) {
		t.Fatal("an empty 128 KiB cache refused 128 KiB")
	}
	// Destaged one after the other: 1.5 ms each, on spindles 0 and 1.
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{{msd(1), 128 << 10}, {msd(2), 64 << 10}, {msd(3.1), 0}} {
		if got := a.Dirty(t0.Add(tc.at)); got != tc.want {
			t.Errorf("dirty at +%v: %d bytes, want %d", tc.at, got, tc.want)
		}
	}
}

// TestWarmRAID6 holds the raid6-hdd array's warm start to what the cold
// one cannot show in a short run: with its 1 GiB cache full of random
// dirty data, writes are admitted at the read-modify-write rate from the
// first second, and a random read waits behind the destages; with it
// empty, writes cost the acknowledgement and reads the media.
func TestWarmRAID6(t *testing.T) {
	p, _ := ProfileByName("raid6-hdd")
	fill := func(a *Array) {
		rng := rand.New(rand.NewSource(7))
		span := a.Capacity() / 4
		for a.Prefill(t0, rng.Int63n(span/(4<<10))*(4<<10), 4<<10) {
		}
	}
	readMs := func(a *Array) float64 {
		rng := rand.New(rand.NewSource(9))
		var sum time.Duration
		for i := range 100 {
			at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
			sum += a.Submit(at, Read, rng.Int63n(p.Capacity()/8192)*8192, 8<<10, 1).Sub(at)
		}
		return float64(sum) / 100 / float64(time.Millisecond)
	}
	for _, tc := range []struct {
		name             string
		warm             bool
		minIOPS, maxLat  float64 // random 4 KiB writes over the first 2 s
		maxIOPS, minLat  float64
		minRead, maxRead float64 // a random 8 KiB read, ms
	}{
		{"cold", false, 5000, 0.2, 1e9, 0, 11, 15.5},
		{"warm", true, 80, 1e9, 200, 50, 20, 1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(p, 1)
			if tc.warm {
				fill(a)
				if d := a.Dirty(t0); d < p.CacheBytes-4<<10 {
					t.Fatalf("warm cache holds %d bytes, want it full (%d)", d, p.CacheBytes)
				}
			}
			iops, _, lat := run(a, 16, 2*time.Second, Write, 4<<10, true, 3)
			t.Logf("%s: random 4 KiB writes %.0f IOPS, mean %.2f ms", tc.name, iops, lat)
			if iops < tc.minIOPS || iops > tc.maxIOPS || lat > tc.maxLat || lat < tc.minLat {
				t.Errorf("%s: %.0f IOPS at %.2f ms; want %g–%g IOPS at %g–%g ms", tc.name, iops, lat, tc.minIOPS, tc.maxIOPS, tc.minLat, tc.maxLat)
			}
			b := New(p, 2)
			if tc.warm {
				fill(b)
			}
			r := readMs(b)
			t.Logf("%s: random 8 KiB read %.1f ms", tc.name, r)
			if r < tc.minRead || r > tc.maxRead {
				t.Errorf("%s: random 8 KiB read %.1f ms, want %g–%g", tc.name, r, tc.minRead, tc.maxRead)
			}
		})
	}
}
