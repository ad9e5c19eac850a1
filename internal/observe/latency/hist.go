// Package latency holds log-linear histograms of I/O latencies and the
// per-tick statistics sanqos takes from them (mean, quantiles). It is pure:
// the block-layer probe (internal/observe/blkprobe) fills these from the kernel, the
// engine reads percentiles from them, and the layout matches the probe's
// BPF program (bpf/blkprobe.bpf.c in internal/observe/blkprobe).
package latency

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout, shared with internal/observe/blkprobe/bpf/blkprobe.bpf.c
// (NBUCKETS, SUBBITS).
const (
	subBits = 4            // 2^subBits sub-buckets per power of two
	subN    = 1 << subBits // values below subN µs get one bucket each
	// NumBuckets covers 0 µs to 2^24 µs (16.8 s); the last bucket also
	// holds everything longer.
	NumBuckets = subN + (24-subBits)*subN
)

// Histogram counts latencies in log-linear buckets of microseconds.
type Histogram [NumBuckets]uint64

// bucketOf is the bucket of a latency of us microseconds; the Go twin of
// bucket() in internal/observe/blkprobe/bpf/blkprobe.bpf.c, used by Add.
func bucketOf(us uint64) int {
	if us < subN {
		return int(us)
	}
	e := 63 - bits.LeadingZeros64(us)
	b := (e-subBits+1)*subN + int((us>>(e-subBits))&(subN-1))
	if b >= NumBuckets {
		b = NumBuckets - 1
	}
	return b
}

// BucketBounds returns the latency range [lo, hi) of bucket i.
func BucketBounds(i int) (lo, hi time.Duration) {
	if i < subN {
		return time.Duration(i) * time.Microsecond, time.Duration(i+1) * time.Microsecond
	}
	e := i/subN + subBits - 1
	m := i % subN
	w := uint64(1) << uint(e-subBits)
	l := uint64(1)<<uint(e) + uint64(m)*w
	return time.Duration(l) * time.Microsecond, time.Duration(l+w) * time.Microsecond
}

// Add counts one latency; for fakes and tests.
func (h *Histogram) Add(d time.Duration) {
	h[bucketOf(uint64(d/time.Microsecond))]++
}

// AddHist adds o's counts to h, bucket by bucket: the histogram of several
// devices' reads.
func (h *Histogram) AddHist(o *Histogram) {
	for i, c := range o {
		h[i] += c
	}
}

// Total is the number of latencies counted.
func (h *Histogram) Total() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Sub returns h − prev bucket by bucket: the histogram of one tick from two
// cumulative ones.
func (h Histogram) Sub(prev Histogram) Histogram {
	var d Histogram
	for i := range h {
		d[i] = h[i] - prev[i]
	}
	return d
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the counted latencies,
// interpolated linearly inside its bucket, or 0 when nothing was counted.
// The interpolation assumes latencies spread evenly across a bucket; its
// error is below the bucket's width (≤ 6.25 % of the value).
func (h *Histogram) Quantile(q float64) time.Duration {
	total := h.Total()
	if total == 0 || q <= 0 || math.IsNaN(q) {
		return 0
	}
	if q > 1 {
		q = 1
	}
	rank := q * float64(total)
	var cum float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo, hi := BucketBounds(i)
			frac := (rank - cum) / float64(c)
			return lo + time.Duration(frac*float64(hi-lo))
		}
		cum += float64(c)
	}
	_, hi := BucketBounds(NumBuckets - 1)
	return hi
}

// Ops is what the probe counted for one direction of one device: completed
// requests, the sum of their latencies (issue to completion) and their
// histogram. Sample returns cumulative values; Sub gives one tick's.
type Ops struct {
	Count uint64
	Sum   time.Duration
	Hist  Histogram
}

// Sub returns the requests completed between prev and o.
func (o Ops) Sub(prev Ops) Ops {
	return Ops{Count: o.Count - prev.Count, Sum: o.Sum - prev.Sum, Hist: o.Hist.Sub(prev.Hist)}
}

// Mean is the mean latency, or 0 when no request completed.
func (o Ops) Mean() time.Duration {
	if o.Count == 0 {
		return 0
	}
	return o.Sum / time.Duration(o.Count)
}

// Quantile is the q-quantile of the latencies (see Histogram.Quantile).
func (o Ops) Quantile(q float64) time.Duration { return o.Hist.Quantile(q) }

// P50, P95 and P99 are the usual quantiles.
func (o Ops) P50() time.Duration { return o.Hist.Quantile(0.50) }
func (o Ops) P95() time.Duration { return o.Hist.Quantile(0.95) }
func (o Ops) P99() time.Duration { return o.Hist.Quantile(0.99) }
