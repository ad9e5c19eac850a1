package iolog

import (
	"math"
	"math/bits"
	"slices"
)

// Mean is the arithmetic mean of xs (0 for none).
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of xs: the
// smallest value that at least p % of the values do not exceed. It is 0 for
// no values. xs is not modified.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	rank = min(max(rank, 1), len(s))
	return s[rank-1]
}

// LatencyOf summarises latencies given in milliseconds.
func LatencyOf(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return Latency{
		Mean: Round3(Mean(s)),
		P50:  Round3(percentileSorted(s, 50)),
		P99:  Round3(percentileSorted(s, 99)),
		Max:  Round3(s[len(s)-1]),
	}
}

// JainIndex is Jain's fairness index of the throughputs xs:
// (Σx)² / (n·Σx²), 1 when all are equal, 1/n when one gets everything.
// It is 1 for no values or all zeroes (nobody is treated worse).
func JainIndex(xs []float64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += x
		s2 += x * x
	}
	if s2 == 0 {
		return 1
	}
	return s * s / (float64(len(xs)) * s2)
}

// Select returns the records of the given kind, thread and op, in order;
// an empty op matches every op.
func Select(recs []Record, kind string, thread int, op string) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == kind && r.Thread == thread && (op == "" || r.Op == op) {
			out = append(out, r)
		}
	}
	return out
}

// Summary returns the last summary of thread 0 for op (any op if empty),
// and whether there was one.
func Summary(recs []Record, op string) (Record, bool) {
	s := Select(recs, KindSummary, 0, op)
	if len(s) == 0 {
		return Record{}, false
	}
	return s[len(s)-1], true
}

// Histogram accumulates latencies of a long run in bounded memory: exact
// below 64 µs, then 64 buckets per power of two (at most 1.6 % relative
// error). Mean and Max are exact.
type Histogram struct {
	counts []int64
	n      int64
	sumUs  float64
	maxUs  float64
}

const subBuckets = 64 // per power of two; the error bound is 1/subBuckets

// Add records one latency in microseconds.
func (h *Histogram) Add(us float64) {
	if us < 0 {
		us = 0
	}
	i := bucketOf(uint64(us))
	if i >= len(h.counts) {
		h.counts = append(h.counts, make([]int64, i+1-len(h.counts))...)
	}
	h.counts[i]++
	h.n++
	h.sumUs += us
	h.maxUs = max(h.maxUs, us)
}

// Count is the number of latencies added.
func (h *Histogram) Count() int64 { return h.n }

func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1 // 2^e ≤ v < 2^(e+1), e ≥ 6
	return subBuckets + (e-6)*subBuckets + int(v>>(e-6)) - subBuckets
}

// bucketMid is the middle of bucket i's value range.
func bucketMid(i int) float64 {
	if i < subBuckets {
		return float64(i)
	}
	e := (i-subBuckets)/subBuckets + 6
	lo := uint64(subBuckets+(i-subBuckets)%subBuckets) << (e - 6)
	width := uint64(1) << (e - 6)
	return float64(lo) + float64(width-1)/2
}

// Quantile returns the nearest-rank p-th percentile in microseconds.
func (h *Histogram) Quantile(p float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p / 100 * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var c int64
	for i, n := range h.counts {
		c += n
		if c >= rank {
			return min(bucketMid(i), h.maxUs)
		}
	}
	return h.maxUs
}

// Latency summarises the histogram in milliseconds.
func (h *Histogram) Latency() Latency {
	if h.n == 0 {
		return Latency{}
	}
	return Latency{
		Mean: Round3(h.sumUs / float64(h.n) / 1000),
		P50:  Round3(h.Quantile(50) / 1000),
		P99:  Round3(h.Quantile(99) / 1000),
		Max:  Round3(h.maxUs / 1000),
	}
}

// Merge adds every latency of src to h.
func (h *Histogram) Merge(src *Histogram) {
	if len(src.counts) > len(h.counts) {
		h.counts = append(h.counts, make([]int64, len(src.counts)-len(h.counts))...)
	}
	for i, n := range src.counts {
		h.counts[i] += n
	}
	h.n += src.n
	h.sumUs += src.sumUs
	h.maxUs = max(h.maxUs, src.maxUs)
}
