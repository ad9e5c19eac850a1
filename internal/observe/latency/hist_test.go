package latency

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestBucketsTile checks that the buckets cover 0 µs to 2^24 µs without gap
// or overlap and that bucketOf puts each bucket's edges into it.
func TestBucketsTile(t *testing.T) {
	var prevHi time.Duration
	for i := 0; i < NumBuckets; i++ {
		lo, hi := BucketBounds(i)
		if lo != prevHi {
			t.Fatalf("bucket %d starts at %v, previous ended at %v", i, lo, prevHi)
		}
		if hi <= lo {
			t.Fatalf("bucket %d is empty: [%v, %v)", i, lo, hi)
		}
		if i >= subN && float64(hi-lo)/float64(lo) > 0.0625+1e-9 {
			t.Errorf("bucket %d [%v, %v) is wider than 6.25 %%", i, lo, hi)
		}
		for _, us := range []uint64{uint64(lo / time.Microsecond), uint64(hi/time.Microsecond) - 1} {
			if got := bucketOf(us); got != i {
				t.Errorf("bucketOf(%d µs) = %d, want %d", us, got, i)
			}
		}
		prevHi = hi
	}
	if prevHi != (1<<24)*time.Microsecond {
		t.Errorf("buckets end at %v, want 2^24 µs", prevHi)
	}
	if got := bucketOf(1 << 40); got != NumBuckets-1 {
		t.Errorf("bucketOf(2^40 µs) = %d, want the last bucket %d", got, NumBuckets-1)
	}
}

// TestQuantileAgainstExact compares the histogram's quantiles with the exact
// ones of the same samples, for shapes latency takes: narrow, uniform and
// long-tailed.
func TestQuantileAgainstExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	shapes := map[string]func() time.Duration{
		"uniform 100–1000µs": func() time.Duration { return time.Duration(100+r.Float64()*900) * time.Microsecond },
		"narrow 250µs±5%":    func() time.Duration { return time.Duration(250*(0.95+0.1*r.Float64())) * time.Microsecond },
		"lognormal 2ms":      func() time.Duration { return time.Duration(2000*math.Exp(0.8*r.NormFloat64())) * time.Microsecond },
		"fast 3–40µs":        func() time.Duration { return time.Duration(3+37*r.Float64()*r.Float64()) * time.Microsecond },
	}
	for name, gen := range shapes {
		var h Histogram
		var xs []float64
		for i := 0; i < 20000; i++ {
			d := gen()
			h.Add(d)
			// The probe truncates to whole µs before bucketing.
			xs = append(xs, float64(d.Truncate(time.Microsecond)))
		}
		sort.Float64s(xs)
		for _, q := range []float64{0.5, 0.95, 0.99} {
			exact := xs[int(math.Ceil(q*float64(len(xs))))-1]
			got := float64(h.Quantile(q))
			// Interpolation errs by less than the width of the bucket
			// (≤ 6.25 %), whatever the shape inside it.
			lo, hi := BucketBounds(bucketOf(uint64(exact / 1e3)))
			if math.Abs(got-exact) > float64(hi-lo) {
				t.Errorf("%s: q%.2f = %v, exact %v", name, q, time.Duration(got), time.Duration(exact))
			}
		}
	}
}

func TestQuantileEdges(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("empty histogram: q50 = %v, want 0", got)
	}
	h.Add(300 * time.Microsecond)
	lo, hi := BucketBounds(bucketOf(300))
	for _, q := range []float64{0.01, 0.5, 1, 2} {
		if got := h.Quantile(q); got < lo || got > hi {
			t.Errorf("one sample of 300µs: q%v = %v, want within [%v, %v]", q, got, lo, hi)
		}
	}
	if got := h.Quantile(0); got != 0 {
		t.Errorf("q0 = %v, want 0", got)
	}
	h.Add(time.Hour)
	if got := h.Quantile(1); got != (1<<24)*time.Microsecond {
		t.Errorf("q1 with an hour-long sample = %v, want the top of the last bucket", got)
	}
}

func TestOpsSubMean(t *testing.T) {
	var a Ops
	for _, d := range []time.Duration{100, 200} {
		a.Count++
		a.Sum += d * time.Microsecond
		a.Hist.Add(d * time.Microsecond)
	}
	b := a
	for _, d := range []time.Duration{1000, 1000, 4000} {
		b.Count++
		b.Sum += d * time.Microsecond
		b.Hist.Add(d * time.Microsecond)
	}
	tick := b.Sub(a)
	if tick.Count != 3 || tick.Hist.Total() != 3 {
		t.Fatalf("tick count %d, histogram total %d, want 3", tick.Count, tick.Hist.Total())
	}
	if got := tick.Mean(); got != 2000*time.Microsecond {
		t.Errorf("tick mean = %v, want 2ms", got)
	}
	if got := tick.P50(); got < 960*time.Microsecond || got > 1024*time.Microsecond {
		t.Errorf("tick p50 = %v, want in 1000µs's bucket", got)
	}
	if got := tick.P99(); got < 3840*time.Microsecond || got > 4096*time.Microsecond {
		t.Errorf("tick p99 = %v, want in 4000µs's bucket", got)
	}
	if (Ops{}).Mean() != 0 {
		t.Error("mean of nothing is not 0")
	}
}
