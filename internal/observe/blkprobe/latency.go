package blkprobe

import "github.com/sanqos/sanqos/internal/observe/latency"

// The probe's counters are latency's histograms: the layout of
// bpf/blkprobe.bpf.c is latency's, so the engine can take percentiles from
// them without linking the BPF loader.
type (
	Histogram = latency.Histogram
	Ops       = latency.Ops
)

// NumBuckets is the number of histogram buckets (NBUCKETS in the BPF C).
const NumBuckets = latency.NumBuckets
