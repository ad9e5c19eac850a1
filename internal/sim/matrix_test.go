package sim

import (
	"bytes"
	"flag"
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

var (
	matrixDisk = flag.String("matrix-disk", "", "TestScenarioMatrix: run only this disk's cells")
	matrixCold = flag.Bool("matrix-cold", false, "TestScenarioMatrix: start raid6-hdd's cache empty, as production never does; "+
		"the guarantees are logged, not asserted")
	matrixSeeds = flag.Int("matrix-seeds", 0, "TestScenarioMatrixSeeds: run every cell under seeds 1…N and log the tally")
)

// TestScenarioMatrix runs every cell of the matrix (about 4 minutes;
// -short: two cells at 30 s) and asserts the guarantees
// (CellResult.Violations) in every cell but those of knownViolations,
// each of which must still break one: a cell the law comes to hold
// leaves the list. -v prints the matrix. raid6-hdd's cells start with
// the 1 GiB cache full, at the steady state of writers that outrun its
// destage (MatrixOptions.ColdCache); -matrix-cold runs them from an
// empty cache, which a 60 s run may end before a rate fills, and only
// logs what breaks (docs/results.md). -matrix-disk runs one disk.
func TestScenarioMatrix(t *testing.T) {
	var cells []Cell
	opts := MatrixOptions{ColdCache: *matrixCold}
	if testing.Short() {
		opts.Duration = 30 * time.Second
		cells = []Cell{
			{Disk: "thesis-2010", Writers: matrixWriters[2], ThresholdMs: 15},
			{Disk: "cloud-3000", Writers: matrixWriters[1], ThresholdMs: 3},
		}
	} else {
		cells = matrixCells()
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
		case r.Static.WriteMBs > r.None.WriteMBs*1.05 && !warm(c, opts):
			// From a full cache a delay can move more than none: it
			// lets the cache drain, and the destager merges whole rows
			// of the streams that uncontrolled writers, admitted one at
			// a time as room frees, interleave.
			t.Errorf("%v: a static delay moved more (%.2f MB/s) than none (%.2f)", c, r.Static.WriteMBs, r.None.WriteMBs)
		}
		if testing.Short() {
			continue // 30 s cells: the guarantees are judged on the full runs
		}
		v := r.Violations()
		why, known := knownViolations[c.key()]
		if opts.ColdCache && c.Disk == "raid6-hdd" {
			if len(v) == 0 {
				held++
			} else {
				t.Logf("%s: cold cache: %s", c.key(), strings.Join(v, "; "))
			}
			continue
		}
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
	cache := "raid6-hdd's cache full"
	if opts.ColdCache {
		cache = "every cache empty"
	}
	t.Logf("scenario matrix (%d cells, %v each run, %s at the start, %d hold every guarantee):\n%s", len(cells), d, cache, held, out.String())
}

// matrixCells are the matrix's cells, or -matrix-disk's.
func matrixCells() []Cell {
	var cells []Cell
	for _, disk := range []string{"thesis-2010", "ssd", "raid6-hdd", "cloud-3000"} {
		if *matrixDisk != "" && disk != *matrixDisk {
			continue
		}
		for _, w := range matrixWriters {
			for _, th := range matrixThresholdsMs[disk] {
				cells = append(cells, Cell{Disk: disk, Writers: w, ThresholdMs: th})
			}
		}
	}
	return cells
}

// warm says whether the cell's runs start with a full cache.
func warm(c Cell, o MatrixOptions) bool {
	sc, err := o.scenario(c, 0)
	return err == nil && sc.WarmCacheBytes > 0
}

// key names a cell in knownViolations.
func (c Cell) key() string { return fmt.Sprintf("%s/%v/%gms", c.Disk, c.Writers, c.ThresholdMs) }

// knownViolations are the cells where the law does not hold its
// guarantees yet, and why (docs/results.md, "The simulator's scenario
// matrix").
// Why the known cells break a guarantee.
const (
	whyFlash     = "flash: the mean is held, deep or large writes scatter the seconds past 1.2 × T"
	whyFullOnset = "full write-back cache: the reader waits 1.5–1.7 × T in the 3 s the delay takes to climb at the writers' onset, and is held under T after"
	whyFullDrain = "full write-back cache: a delay drains it within seconds (sequential streams destage in whole rows), then the writers fill it at line rate again and the law, reacting to the reads, lags"
	whyRefill    = "full write-back cache: the law lets the drained cache fill again and holds the reader there, with writes waiting on it; a fixed delay that keeps it draining moves more"
	whyDeepOnset = "64 writes outstanding per connection at the first burst's onset: the delay is at its ceiling within 0.3 s, but the ceiling, rising by half every 0.3 s, takes 2 s to reach the 100–200 ms these writers need; the reader's third second from the onset is just over on seed 1 (p95 1.20 × T), not on seeds 2–5"
)

var knownViolations = map[string]string{
	"thesis-2010/rand-16k-3thr-qd64-bursty/20ms": whyDeepOnset,
	"ssd/seq-1m-3thr-qd4-steady/2ms":             whyFlash,
	"raid6-hdd/seq-64k-12thr-qd1-bursty/50ms":    whyFullDrain,
	"raid6-hdd/rand-4k-12thr-qd1-steady/50ms":    whyFullOnset,
	"raid6-hdd/seq-1m-3thr-qd4-steady/50ms":      whyRefill,
}
