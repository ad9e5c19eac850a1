// Package blkprobe measures block-layer I/O latency per device in
// microseconds through eBPF, for devices named as in /proc/diskstats.
//
// /proc/diskstats counts read time in whole milliseconds, which cannot tell
// a 0.3 ms flash read from a 0.9 ms one nor show a tail. blkprobe attaches
// two BTF tracepoint programs (tp_btf/block_rq_issue and
// tp_btf/block_rq_complete) that time every read and write request to the
// watched devices and aggregate in the kernel: per device and direction a
// count, a latency sum and a log-linear histogram (16 sub-buckets per power
// of two, 1 µs to 16.8 s; a bucket is at most 6.25 % wide). Nothing is sent
// to user space per I/O; Sample reads the counters once per tick.
//
// The age of the oldest read still outstanding comes from a small per-device
// table of read slots (see bpf/blkprobe.bpf.c): one 1 KiB map lookup per device
// per tick instead of a scan of the in-flight hash map. Its error is one
// sided: a read that found its slots taken (counted in Untracked) is not
// seen, so the age reported is never more than the truth.
//
// Where eBPF cannot be used (no kernel BTF, no CAP_BPF/CAP_PERFMON, an old
// kernel), Open returns an error that matches ErrUnavailable and says why,
// so the caller can say so once and fall back to /proc/diskstats.
//
// The compiled object blkprobe.bpf.o is committed and embedded, so sanqos
// needs no compiler at run time; `make bpf` regenerates it (needs clang).
package blkprobe

//go:generate make -C ../.. bpf
