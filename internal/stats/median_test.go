package stats

import (
	"math"
	"testing"
)

// reversed is n, n-1, …, 1: MedianCI and Median sort what they are given.
func reversed(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(n - i)
	}
	return xs
}

func TestMedianCI(t *testing.T) {
	for _, c := range []struct {
		n           int
		conf        float64
		med, lo, hi float64
	}{
		// n = 8: P(B(8,½) < 1) = 1/256 ≤ 0.005, so k = 1: the range.
		{8, 0.99, 4.5, 1, 8},
		// n = 7: no k reaches 99 %: the range.
		{7, 0.99, 4, 1, 7},
		// n = 20: k = 4 (P(B < 4) = 0.0013, P(B < 5) = 0.0059).
		{20, 0.99, 10.5, 4, 17},
		// From the binomial tables: n = 100 at 99 %: the 37th and 64th;
		// at 95 %: the 40th and 61st.
		{100, 0.99, 50.5, 37, 64},
		{100, 0.95, 50.5, 40, 61},
		{5, 0.99, 3, 1, 5},
		{1, 0.99, 1, 1, 1},
	} {
		med, lo, hi := MedianCI(reversed(c.n), c.conf)
		if med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("MedianCI(1..%d, %.2f) = %v [%v, %v], want %v [%v, %v]", c.n, c.conf, med, lo, hi, c.med, c.lo, c.hi)
		}
	}
	if m, _, _ := MedianCI(nil, 0.99); !math.IsNaN(m) {
		t.Errorf("MedianCI(nil) = %v, want NaN", m)
	}
	if n := MinPairs(0.99); n != 8 {
		t.Errorf("MinPairs(0.99) = %d, want 8", n)
	}
}

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	if m := Median(xs); m != 2 {
		t.Errorf("Median(3, 1, 2) = %v", m)
	}
	if xs[0] != 3 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("Median(4, 1, 3, 2) = %v", m)
	}
	if !math.IsNaN(Median(nil)) {
		t.Errorf("Median(nil) is not NaN")
	}
}
