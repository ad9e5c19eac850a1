package iolog

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	xs := []float64{15, 20, 35, 40, 50}
	for _, tc := range []struct{ p, want float64 }{
		{5, 15}, {30, 20}, {40, 20}, {50, 35}, {99, 50}, {100, 50},
	} {
		if got := Percentile(xs, tc.p); got != tc.want {
			t.Errorf("P%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if xs[0] != 15 || xs[4] != 50 {
		t.Error("Percentile modified its input")
	}
	if Percentile(nil, 50) != 0 || Mean(nil) != 0 {
		t.Error("empty input should give 0")
	}
	if got := Percentile([]float64{9, 1, 5}, 50); got != 5 {
		t.Errorf("unsorted median = %v", got)
	}
}

func TestLatencyOf(t *testing.T) {
	var ms []float64
	for i := 100; i >= 1; i-- {
		ms = append(ms, float64(i))
	}
	got := LatencyOf(ms)
	if want := (Latency{Mean: 50.5, P50: 50, P99: 99, Max: 100}); got != want {
		t.Errorf("LatencyOf(1..100) = %+v, want %+v", got, want)
	}
	if LatencyOf(nil) != (Latency{}) {
		t.Error("LatencyOf(nil) not zero")
	}
}

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 3, 3, 3}, 1},
		{[]float64{1, 0, 0, 0}, 0.25},
		{[]float64{1, 2}, 0.9},
		{nil, 1},
		{[]float64{0, 0}, 1},
	} {
		if got := JainIndex(tc.xs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("JainIndex(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

func TestHistogramMatchesExactWithinBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	var ms []float64
	for i := 0; i < 20000; i++ {
		// Log-normal-ish latencies from 20 µs to a few hundred ms.
		us := math.Exp(3 + rng.Float64()*9)
		h.Add(us)
		ms = append(ms, us/1000)
	}
	exact, approx := LatencyOf(ms), h.Latency()
	if h.Count() != 20000 {
		t.Fatalf("Count = %d", h.Count())
	}
	if math.Abs(approx.Mean-exact.Mean) > 0.001 || approx.Max != exact.Max {
		t.Errorf("mean/max must be exact: %+v vs %+v", approx, exact)
	}
	for _, q := range []struct{ a, e float64 }{{approx.P50, exact.P50}, {approx.P99, exact.P99}} {
		if rel := math.Abs(q.a-q.e) / q.e; rel > 1.0/subBuckets+0.001 {
			t.Errorf("quantile %v vs exact %v: relative error %.4f over the bound", q.a, q.e, rel)
		}
	}
	var small Histogram
	for _, us := range []float64{3, 1, 2} {
		small.Add(us)
	}
	if got := small.Quantile(50); got != 2 {
		t.Errorf("exact small bucket median = %v, want 2", got)
	}
	var empty Histogram
	if empty.Latency() != (Latency{}) || empty.Quantile(50) != 0 {
		t.Error("empty histogram not zero")
	}
}

func TestBucketsAreContiguous(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<16; v++ {
		b := bucketOf(v)
		if b != prev && b != prev+1 {
			t.Fatalf("bucket jumps from %d to %d at %d", prev, b, v)
		}
		if mid := bucketMid(b); math.Abs(mid-float64(v)) > float64(v)/subBuckets+0.5 {
			t.Fatalf("value %d in bucket %d with middle %v", v, b, mid)
		}
		prev = b
	}
}
