package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// opStats is what one thread did with one op: the current one-second
// interval exactly (for its percentiles) and the whole run in a histogram.
type opStats struct {
	cur      []float64 // latencies in ms this interval
	curDone  []float64 // completion times (s since start) this interval
	curSizes []int64   // bytes of each completion this interval
	curBytes int64
	curGap   float64 // longest gap between completions (ms) this interval
	hist     iolog.Histogram
	bytes    int64
	gap      float64 // longest gap of the run (ms)
}

// threadStats is shared between a worker (adds) and the reporter (takes
// intervals); the mutex is held for a few field updates per I/O.
type threadStats struct {
	mu            sync.Mutex
	ops           [2]opStats // indexed by opIndex
	errors        int64
	verified      int64
	mismatches    int64
	firstMismatch string
}

const (
	opRead = iota
	opWrite
)

var opNames = [2]string{iolog.OpRead, iolog.OpWrite}

// add records one completed I/O: its latency, its size, when it
// completed (since the start) and the gap since the thread's previous
// completion, waits the job asked for left out.
func (s *threadStats) add(op int, lat time.Duration, n int64, done, gap time.Duration) {
	ms := float64(lat) / float64(time.Millisecond)
	gapMs := float64(gap) / float64(time.Millisecond)
	s.mu.Lock()
	o := &s.ops[op]
	o.cur = append(o.cur, ms)
	o.curDone = append(o.curDone, done.Seconds())
	o.curSizes = append(o.curSizes, n)
	o.curBytes += n
	o.curGap = max(o.curGap, gapMs)
	o.gap = max(o.gap, gapMs)
	o.hist.Add(float64(lat) / float64(time.Microsecond))
	o.bytes += n
	s.mu.Unlock()
}

func (s *threadStats) addError() {
	s.mu.Lock()
	s.errors++
	s.mu.Unlock()
}

func (s *threadStats) addVerified(mismatch error) {
	s.mu.Lock()
	s.verified++
	if mismatch != nil {
		s.mismatches++
		if s.firstMismatch == "" {
			s.firstMismatch = mismatch.Error()
		}
	}
	s.mu.Unlock()
}

// interval is one op's share of one thread's finished interval.
type interval struct {
	lat   []float64
	done  []float64
	sizes []int64
	bytes int64
	gap   float64
}

// take ends the current interval and returns it per op.
func (s *threadStats) take() [2]interval {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [2]interval
	for i := range s.ops {
		o := &s.ops[i]
		out[i] = interval{lat: o.cur, done: o.curDone, sizes: o.curSizes, bytes: o.curBytes, gap: o.curGap}
		o.cur, o.curDone, o.curSizes, o.curBytes, o.curGap = nil, nil, nil, 0, 0
	}
	return out
}

// record builds one interval or summary line.
func record(kind, job string, thread int, op string, t, dur float64, lat iolog.Latency, ios, bytes int64) iolog.Record {
	r := iolog.Record{Kind: kind, T: iolog.Round3(t), Job: job, Thread: thread, Op: op,
		Dur: iolog.Round3(dur), Lat: lat, IOs: ios, Bytes: bytes}
	if dur > 0 {
		r.MBs = iolog.Round3(float64(bytes) / dur / 1e6)
		r.IOPS = iolog.Round3(float64(ios) / dur)
	}
	return r
}

// reporter turns the threads' stats into per-second and summary lines.
type reporter struct {
	job       string
	primary   int // the op the job is about; always reported, even when idle
	perThread bool
	threads   []*threadStats
	out       *iolog.Writer
	last      float64 // end of the previous interval, seconds since start
}

// pending reports whether any thread has I/O in the current interval.
func (r *reporter) pending() bool {
	for _, ts := range r.threads {
		ts.mu.Lock()
		n := len(ts.ops[0].cur) + len(ts.ops[1].cur)
		ts.mu.Unlock()
		if n > 0 {
			return true
		}
	}
	return false
}

// interval writes the lines of the interval that ends t seconds after start.
func (r *reporter) interval(t float64) error {
	dur := t - r.last
	r.last = t
	start := t - dur
	var all [2][]float64
	var allBytes [2]int64
	var allGap [2]float64
	var bins [2][]int64
	for op := range bins {
		bins[op] = make([]int64, iolog.BinCount(dur))
	}
	var lines []iolog.Record
	for i, ts := range r.threads {
		iv := ts.take()
		for op := range iv {
			all[op] = append(all[op], iv[op].lat...)
			allBytes[op] += iv[op].bytes
			allGap[op] = max(allGap[op], iv[op].gap)
			for k, d := range iv[op].done {
				b := min(max(int((d-start)/iolog.BinSeconds), 0), len(bins[op])-1)
				bins[op][b] += iv[op].sizes[k]
			}
			if r.perThread && (op == r.primary || len(iv[op].lat) > 0) {
				rec := record(iolog.KindInterval, r.job, i+1, opNames[op], t, dur,
					iolog.LatencyOf(iv[op].lat), int64(len(iv[op].lat)), iv[op].bytes)
				rec.MaxGapMs = iolog.Round3(iv[op].gap)
				lines = append(lines, rec)
			}
		}
	}
	for op := range all {
		if op == r.primary || len(all[op]) > 0 {
			rec := record(iolog.KindInterval, r.job, 0, opNames[op], t, dur,
				iolog.LatencyOf(all[op]), int64(len(all[op])), allBytes[op])
			rec.MaxGapMs = iolog.Round3(allGap[op])
			rec.BinsBytes = bins[op]
			if err := r.out.Write(rec); err != nil {
				return err
			}
		}
	}
	for _, l := range lines {
		if err := r.out.Write(l); err != nil {
			return err
		}
	}
	return r.out.Flush()
}

// totals is the whole run of the job, returned to main for its messages.
type totals struct {
	bytes, ios           int64
	errors               int64
	verified, mismatches int64
	firstMismatch        string
	verifying            bool
	lat                  iolog.Latency
	elapsed              float64
	threadBytes          []int64
}

// summary writes per-thread summaries, then the job's, the last line being
// the job's summary of the op that was checked (verify) or the primary op.
func (r *reporter) summary(elapsed float64, verifying bool) (totals, error) {
	tot := totals{elapsed: elapsed, verifying: verifying, threadBytes: make([]int64, len(r.threads))}
	var all [2]iolog.Histogram
	var allBytes [2]int64
	var allGap [2]float64
	var lines []iolog.Record
	order := []int{r.primary, 1 - r.primary}
	for i, ts := range r.threads {
		ts.mu.Lock()
		tot.errors += ts.errors
		tot.verified += ts.verified
		tot.mismatches += ts.mismatches
		if tot.firstMismatch == "" {
			tot.firstMismatch = ts.firstMismatch
		}
		for _, op := range order {
			o := &ts.ops[op]
			all[op].Merge(&o.hist)
			allBytes[op] += o.bytes
			allGap[op] = max(allGap[op], o.gap)
			tot.threadBytes[i] += o.bytes
			if op == r.primary || o.hist.Count() > 0 {
				rec := record(iolog.KindSummary, r.job, i+1, opNames[op], elapsed, elapsed,
					o.hist.Latency(), o.hist.Count(), o.bytes)
				rec.MaxGapMs = iolog.Round3(o.gap)
				if op == r.primary {
					rec.Errors = ts.errors
				}
				if verifying && op == opRead {
					v, m := ts.verified, ts.mismatches
					rec.Verified, rec.Mismatches = &v, &m
				}
				lines = append(lines, rec)
			}
		}
		ts.mu.Unlock()
	}
	// With verify the read-back summary goes last: it carries the verdict.
	if verifying && r.primary == opWrite {
		order = []int{opWrite, opRead}
	}
	for _, op := range order {
		if op != r.primary && all[op].Count() == 0 && !(verifying && op == opRead) {
			continue
		}
		rec := record(iolog.KindSummary, r.job, 0, opNames[op], elapsed, elapsed,
			all[op].Latency(), all[op].Count(), allBytes[op])
		rec.MaxGapMs = iolog.Round3(allGap[op])
		if op == r.primary {
			rec.Errors = tot.errors
			tot.lat = rec.Lat
		}
		if verifying && op == opRead {
			v, m := tot.verified, tot.mismatches
			rec.Verified, rec.Mismatches = &v, &m
		}
		tot.bytes += rec.Bytes
		tot.ios += rec.IOs
		lines = append(lines, rec)
	}
	for _, l := range lines {
		if err := r.out.Write(l); err != nil {
			return tot, err
		}
	}
	return tot, r.out.Flush()
}

func (t totals) String() string {
	s := fmt.Sprintf("%.1fs: %d I/Os, %.1f MiB, %.2f MB/s, latency mean %.3f ms p99 %.3f ms max %.3f ms",
		t.elapsed, t.ios, float64(t.bytes)/(1<<20), float64(t.bytes)/max(t.elapsed, 1e-9)/1e6, t.lat.Mean, t.lat.P99, t.lat.Max)
	if len(t.threadBytes) > 1 {
		xs := make([]float64, len(t.threadBytes))
		for i, b := range t.threadBytes {
			xs[i] = float64(b)
		}
		s += fmt.Sprintf(", Jain's index %.3f over %d threads (min %.1f MiB)", iolog.JainIndex(xs), len(xs), slices.Min(xs)/(1<<20))
	}
	if t.verifying {
		s += fmt.Sprintf(", verified %d blocks, %d mismatches", t.verified, t.mismatches)
	}
	return s
}
