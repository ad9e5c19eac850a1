package sim

import (
	"bytes"
	"os"
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

// TestScenarioMatrix prints the matrix (go test -run ScenarioMatrix -v).
//
// Read it with two things in mind before asserting on it. On raid6-hdd
// a 60 s run is shorter than the time some rates take to fill the 1 GiB
// cache: a static delay that keeps the writers under ~17 MB/s "meets T"
// only because the cache has not filled yet; once it has, small random
// writers run at the read-modify-write rate (0.5 MB/s for 4 KiB), under
// the leave threshold, and stay in the set only because they are judged
// by their writes outstanding (policy "Demand"; TestSteadyWritersStayHeld).
// And the writers' share can exceed 1: the best static delay meets T in
// every second's p95, the controller only on average.
// It asserts nothing about the controller yet: SANQOS_SIM_MATRIX=1 runs
// every cell (minutes); without it, two cells at 30 s check that the
// harness runs and its numbers hang together.
func TestScenarioMatrix(t *testing.T) {
	var cells []Cell
	opts := MatrixOptions{}
	if os.Getenv("SANQOS_SIM_MATRIX") != "" {
		for _, disk := range []string{"thesis-2010", "ssd", "raid6-hdd", "cloud-3000"} {
			for _, w := range matrixWriters {
				for _, th := range matrixThresholdsMs[disk] {
					cells = append(cells, Cell{Disk: disk, Writers: w, ThresholdMs: th})
				}
			}
		}
	} else {
		opts.Duration = 30 * time.Second
		cells = []Cell{
			{Disk: "thesis-2010", Writers: matrixWriters[2], ThresholdMs: 15},
			{Disk: "cloud-3000", Writers: matrixWriters[1], ThresholdMs: 3},
		}
	}
	var out bytes.Buffer
	MatrixHeader(&out)
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
	}
	d := opts.Duration
	if d == 0 {
		d = 60 * time.Second
	}
	t.Logf("scenario matrix (%d cells, %v each run):\n%s", len(cells), d, out.String())
}
