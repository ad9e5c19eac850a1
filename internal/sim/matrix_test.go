package sim

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// matrixThresholdsMs are each disk's thresholds: between its reader's
// wait alone and behind uncontrolled writers.
var matrixThresholdsMs = map[string][]float64{
	"thesis-2010": {10, 15, 20},
	"ssd":         {0.5, 1, 2},
	"raid6-hdd":   {20, 30, 50},
	"cloud-3000":  {1.5, 3, 6},
}

// matrixWriters span the writers: sequential and random,
// 4 KiB–1 MiB, 3–48 threads, iodepth 1–64, bursty and steady.
var matrixWriters = []Writers{
	{Random: false, Bytes: 64 << 10, Threads: 12, IODepth: 1, Bursty: true}, // the thesis's
	{Random: true, Bytes: 4 << 10, Threads: 12, IODepth: 1},                 // issue 33's continuous small writers
	{Random: true, Bytes: 16 << 10, Threads: 3, IODepth: 32},                // VM-like: three initiators at iodepth 32
	{Random: true, Bytes: 16 << 10, Threads: 3, IODepth: 64, Bursty: true},
	{Random: false, Bytes: 1 << 20, Threads: 3, IODepth: 4},
	{Random: true, Bytes: 8 << 10, Threads: 48, IODepth: 1, Bursty: true},
}

// TestScenarioMatrix runs every cell of the matrix (about 4 minutes;
// -short: two cells at 30 s) and asserts the guarantees
// (CellResult.Violations) in every cell but those of knownViolations,
// each of which must still break one: a cell the law comes to hold
// leaves the list. -v prints the matrix. On raid6-hdd a 60 s run may end
// before a rate fills the 1 GiB cache: a static delay that keeps the
// writers under ~17 MB/s "meets T" then only because the cache has not
// filled yet, and the writers' share can exceed 1 (the best static delay
// meets T in every second's p95, the controller only on average).
func TestScenarioMatrix(t *testing.T) {
	var cells []Cell
	opts := MatrixOptions{}
	if testing.Short() {
		opts.Duration = 30 * time.Second
		cells = []Cell{
			{Disk: "thesis-2010", Writers: matrixWriters[2], ThresholdMs: 15},
			{Disk: "cloud-3000", Writers: matrixWriters[1], ThresholdMs: 3},
		}
	} else {
		for _, disk := range []string{"thesis-2010", "ssd", "raid6-hdd", "cloud-3000"} {
			for _, w := range matrixWriters {
				for _, th := range matrixThresholdsMs[disk] {
					cells = append(cells, Cell{Disk: disk, Writers: w, ThresholdMs: th})
				}
			}
		}
	}
	var out bytes.Buffer
	MatrixHeader(&out)
	held := 0
	for _, c := range cells {
		r, err := RunCell(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		r.Row(&out)
		switch {
		case r.None.WriteMBs <= 0 || r.PID.WriteMBs <= 0:
			t.Errorf("%v: writers moved nothing (none %.2f, pid %.2f MB/s)", c, r.None.WriteMBs, r.PID.WriteMBs)
		case r.StaticMet && r.Static.ReadLatencyMs.P95 > c.ThresholdMs:
			t.Errorf("%v: the best static delay %g ms has p95 %.2f over T", c, r.StaticMs, r.Static.ReadLatencyMs.P95)
		case r.Static.WriteMBs > r.None.WriteMBs*1.05:
			t.Errorf("%v: a static delay moved more (%.2f MB/s) than none (%.2f)", c, r.Static.WriteMBs, r.None.WriteMBs)
		}
		if testing.Short() {
			continue // 30 s cells: the guarantees are judged on the full runs
		}
		v := r.Violations()
		why, known := knownViolations[c.key()]
		switch {
		case len(v) > 0 && !known:
			t.Errorf("%s: %s", c.key(), strings.Join(v, "; "))
		case len(v) == 0 && known:
			t.Errorf("%s now holds every guarantee: remove it from knownViolations (%s)", c.key(), why)
		case len(v) == 0:
			held++
		default:
			t.Logf("%s: known (%s): %s", c.key(), why, strings.Join(v, "; "))
		}
	}
	d := opts.Duration
	if d == 0 {
		d = 60 * time.Second
	}
	t.Logf("scenario matrix (%d cells, %v each run, %d hold every guarantee):\n%s", len(cells), d, held, out.String())
}

// key names a cell in knownViolations.
func (c Cell) key() string { return fmt.Sprintf("%s/%v/%gms", c.Disk, c.Writers, c.ThresholdMs) }

// knownViolations are the cells where the law does not hold its
// guarantees yet, and why (docs/results.md, "The simulator's scenario
// matrix").
// Why the known cells break a guarantee.
const (
	whyFlash      = "flash: the mean is held, deep or large writes scatter the seconds past 1.2 × T"
	whyCacheFills = "write-back cache: the writers slow once it fills, and the static delay is judged before it has"
	whyCacheFull  = "write-back cache: 1 GiB fills at line rate in the first seconds, then destages at the random-write rate; no delay under the ceiling drains it within the run"
	whyBucket     = "IOPS and throughput caps: the delay dithers at the cap, each decrease releases a burst that empties the bucket"
)

var knownViolations = map[string]string{
	"ssd/rand-16k-3thr-qd64-bursty/0.5ms":        whyFlash,
	"ssd/seq-1m-3thr-qd4-steady/1ms":             whyFlash,
	"ssd/seq-1m-3thr-qd4-steady/2ms":             whyFlash,
	"raid6-hdd/seq-64k-12thr-qd1-bursty/20ms":    whyCacheFills,
	"raid6-hdd/rand-4k-12thr-qd1-steady/50ms":    whyCacheFills,
	"raid6-hdd/rand-16k-3thr-qd32-steady/20ms":   whyCacheFull,
	"raid6-hdd/rand-16k-3thr-qd32-steady/30ms":   whyCacheFull,
	"raid6-hdd/rand-16k-3thr-qd32-steady/50ms":   whyCacheFull,
	"raid6-hdd/rand-16k-3thr-qd64-bursty/20ms":   whyCacheFull,
	"raid6-hdd/rand-16k-3thr-qd64-bursty/30ms":   whyCacheFull,
	"raid6-hdd/rand-16k-3thr-qd64-bursty/50ms":   whyCacheFull,
	"raid6-hdd/seq-1m-3thr-qd4-steady/20ms":      whyCacheFills,
	"raid6-hdd/seq-1m-3thr-qd4-steady/50ms":      whyCacheFills,
	"raid6-hdd/rand-8k-48thr-qd1-bursty/20ms":    whyCacheFull,
	"raid6-hdd/rand-8k-48thr-qd1-bursty/30ms":    whyCacheFull,
	"raid6-hdd/rand-8k-48thr-qd1-bursty/50ms":    whyCacheFull,
	"cloud-3000/rand-16k-3thr-qd64-bursty/1.5ms": whyBucket,
	"cloud-3000/rand-16k-3thr-qd64-bursty/3ms":   whyBucket,
	"cloud-3000/seq-1m-3thr-qd4-steady/1.5ms":    whyBucket,
	"cloud-3000/seq-1m-3thr-qd4-steady/3ms":      whyBucket,
	"cloud-3000/seq-1m-3thr-qd4-steady/6ms":      whyBucket,
}
