// Package stats holds the order statistics of side-by-side measurements:
// a median and its distribution-free confidence interval, which every
// ratio this project claims (the probe's cost, the data path's idle
// overhead) is judged by, on a machine too noisy for a mean.
package stats

import (
	"math"
	"sort"
)

// Median of xs (the mean of the middle two for an even count); NaN for
// none. xs is not changed.
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
