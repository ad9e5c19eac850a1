// Package iolog defines the JSON-lines records the iSCSI load generator
// (cmd/sanqos-iscsiload) writes — one line per second per job and thread,
// a final summary, and optionally one line per I/O — together with a
// reader and the summary helpers (mean, percentiles, per-second series,
// Jain's fairness index) that the lab experiments compute from them.
//
// Units are fixed by the field names: seconds for t, milliseconds for
// lat_ms, microseconds for lat_us, 10^6 bytes per second for mb_s. Thread 0
// means all threads of the job together; threads are numbered from 1.
package iolog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sync"
)

// Record kinds.
const (
	// KindInterval is one second (or the last, shorter, part of one) of
	// one op of one thread, or of all threads when Thread is 0.
	KindInterval = "interval"
	// KindSummary covers the whole run; the very last line of a run is the
	// summary of thread 0.
	KindSummary = "summary"
	// KindBurst is one thread's share of one burst of an on/off job: T
	// is its last completion, Dur the time from the burst's start to it,
	// so MBs is the rate the thread got while it was on. Logs written
	// before this kind existed simply have none.
	KindBurst = "burst"
)

// BinSeconds is the width of the sub-second bins of BinsBytes: 100 ms,
// fine enough to see a writer paced unevenly within a second.
const BinSeconds = 0.1

// BinCount is how many bins an interval of dur seconds has: a last bin
// shorter than a millisecond is the ticker's jitter, not a bin.
func BinCount(dur float64) int { return max(1, int(math.Ceil(dur/BinSeconds-0.01))) }

// Ops.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// Latency summarises I/O latencies in milliseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Record is one line of the per-second log. Fields after Bytes appear in
// summaries only.
type Record struct {
	Kind string `json:"kind"`
	// T is the end of the interval (or of the run, for summaries) in
	// seconds since all threads started.
	T      float64 `json:"t"`
	Job    string  `json:"job"`
	Thread int     `json:"thread"`
	Op     string  `json:"op"`
	// Dur is how long the record covers, in seconds (1 except for the
	// last interval and for summaries).
	Dur   float64 `json:"dur"`
	MBs   float64 `json:"mb_s"`
	IOPS  float64 `json:"iops"`
	Lat   Latency `json:"lat_ms"`
	IOs   int64   `json:"ios"`
	Bytes int64   `json:"bytes"`

	// MaxGapMs is the longest time the thread (thread 0: any thread)
	// waited from one completion to the next, not counting the waits the
	// job asks for (rate limit, on/off pauses): the longest an
	// application on it would have stalled. Intervals, summaries and
	// bursts; absent in older logs.
	MaxGapMs float64 `json:"max_gap_ms,omitempty"`
	// BinsBytes, in thread 0's intervals, is the bytes completed in each
	// BinSeconds of the interval (the last bin may be shorter); absent
	// in older logs.
	BinsBytes []int64 `json:"bins_bytes,omitempty"`

	// Errors counts failed I/Os.
	Errors int64 `json:"errors,omitempty"`
	// Verified and Mismatches count blocks checked by a verify run; they
	// are present (even when 0) exactly when the run verified.
	Verified   *int64 `json:"verified,omitempty"`
	Mismatches *int64 `json:"mismatches,omitempty"`
}

// IO is one line of the per-I/O log.
type IO struct {
	T      float64 `json:"t"` // when the I/O was issued, seconds since start
	Thread int     `json:"thread"`
	Op     string  `json:"op"`
	Offset int64   `json:"offset"` // bytes
	Len    int64   `json:"len"`    // bytes
	LatUs  float64 `json:"lat_us"`
}

// Writer writes records as JSON lines; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   *bufio.Writer
	enc *json.Encoder
}

// NewWriter returns a Writer on w. Call Flush before closing w.
func NewWriter(w io.Writer) *Writer {
	bw := bufio.NewWriter(w)
	return &Writer{w: bw, enc: json.NewEncoder(bw)}
}

// Write appends v (a Record or an IO) as one line.
func (w *Writer) Write(v any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.enc.Encode(v); err != nil {
		return fmt.Errorf("writing log line: %w", err)
	}
	return nil
}

// Flush writes buffered lines out.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Flush()
}

// ReadRecords parses a per-second log. Blank lines are skipped; any other
// line that is not a record is an error naming its line number.
func ReadRecords(r io.Reader) ([]Record, error) {
	return readLines[Record](r, func(rec Record) error {
		if rec.Kind != KindInterval && rec.Kind != KindSummary && rec.Kind != KindBurst {
			return fmt.Errorf("unknown kind %q", rec.Kind)
		}
		return nil
	})
}

// ReadIOs parses a per-I/O log.
func ReadIOs(r io.Reader) ([]IO, error) {
	return readLines[IO](r, func(io IO) error {
		if io.Op != OpRead && io.Op != OpWrite {
			return fmt.Errorf("unknown op %q", io.Op)
		}
		return nil
	})
}

func readLines[T any](r io.Reader, check func(T) error) ([]T, error) {
	var out []T
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		if err := check(v); err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading log: %w", err)
	}
	return out, nil
}

// Round3 rounds x to three decimals, enough for ms of µs resolution and
// short log lines.
func Round3(x float64) float64 { return math.Round(x*1000) / 1000 }
