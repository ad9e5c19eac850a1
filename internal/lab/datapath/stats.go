package datapath

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Quantile is the q-quantile of sorted xs by nearest rank; 0 for none.
func Quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := int(q*float64(len(xs))+0.5) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// HoldErrors are each exchange's round trip minus base minus hold,
// sorted: how much later than the delay asked for the reply came.
func HoldErrors(rtt []time.Duration, base, hold time.Duration) []time.Duration {
	e := make([]time.Duration, len(rtt))
	for i, r := range rtt {
		e[i] = r - base - hold
	}
	slices.Sort(e)
	return e
}

// Median of xs (the mean of the middle two for an even count); NaN for
// none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	n := len(ys)
	if n%2 == 1 {
		return ys[n/2]
	}
	return (ys[n/2-1] + ys[n/2]) / 2
}

// MedianCI is the median of xs and its distribution-free interval at
// level conf: the order statistics x(k) and x(n+1-k), k the largest with
// P(Binomial(n, ½) < k) ≤ (1-conf)/2. With too few values for any such
// k the interval is the whole range, which then holds less than conf.
func MedianCI(xs []float64, conf float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	ys := append([]float64(nil), xs...)
	sort.Float64s(ys)
	n := len(ys)
	k := ciRank(n, conf)
	if k == 0 {
		return Median(ys), ys[0], ys[n-1]
	}
	return Median(ys), ys[k-1], ys[n-k]
}

// ciRank is MedianCI's k for n values (0: none reaches conf).
func ciRank(n int, conf float64) int {
	lg := func(m int) float64 { v, _ := math.Lgamma(float64(m)); return v }
	k, cum := 0, 0.0
	for i := range n {
		p := math.Exp(lg(n+1) - lg(i+1) - lg(n-i+1) - float64(n)*math.Ln2)
		if cum+p > (1-conf)/2 {
			break
		}
		cum += p
		k = i + 1
	}
	return k
}

// MinPairs is the fewest values whose median has a distribution-free
// interval at conf (below it MedianCI returns the range).
func MinPairs(conf float64) int {
	for n := 1; ; n++ {
		if ciRank(n, conf) > 0 {
			return n
		}
	}
}
