package sim

import (
	"strings"
	"testing"
)

// TestScenarioMatrixSeeds runs the matrix under seeds 1…N, to judge a
// change to the law beyond one seed's luck (docs/ablation.md):
//
//	go test ./internal/sim -run TestScenarioMatrixSeeds -v -timeout 1h -args -matrix-seeds 3
//
// (about 2 minutes a seed; -matrix-disk runs one disk). It logs each run
// that breaks a guarantee and the tally (MatrixTally) for the two laws
// to be compared; the guarantees themselves are asserted on seed 1 by
// TestScenarioMatrix.
func TestScenarioMatrixSeeds(t *testing.T) {
	if *matrixSeeds <= 0 {
		t.Skip("a measurement: -args -matrix-seeds N runs it")
	}
	var tally MatrixTally
	for seed := int64(1); seed <= int64(*matrixSeeds); seed++ {
		for _, c := range matrixCells() {
			r, err := RunCell(c, MatrixOptions{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if r.None.WriteMBs <= 0 || r.PID.WriteMBs <= 0 {
				t.Errorf("seed %d %s: writers moved nothing (none %.2f, pid %.2f MB/s)", seed, c.key(), r.None.WriteMBs, r.PID.WriteMBs)
			}
			tally.Add(r)
			if v := r.Violations(); len(v) > 0 {
				t.Logf("seed %d %s: %s", seed, c.key(), strings.Join(v, "; "))
			}
		}
	}
	t.Logf("seeds 1–%d: %v", *matrixSeeds, tally)
}

func TestMatrixTally(t *testing.T) {
	met := func(p95OverT, overPct, share float64) CellResult {
		return CellResult{StaticMet: true, P95OverT: p95OverT, OverPct: overPct, Share: share}
	}
	var m MatrixTally
	for _, r := range []CellResult{
		met(0.9, 2, 2),
		met(1.3, 6, 0.5), // p95 over 1.2 × T and writers under 0.9: breaks
		{StaticMet: false, P95OverT: 30, OverPct: 100, Share: 1, None: Summary{ReadLatencyMs: Dist{P95: 10}}, PID: Summary{ReadLatencyMs: Dist{P95: 9}}},
	} {
		m.Add(r)
	}
	if m.Runs != 3 || m.Violating != 1 || m.Met != 2 {
		t.Errorf("runs %d, violating %d, met %d: want 3, 1, 2", m.Runs, m.Violating, m.Met)
	}
	// The unmet cell's p95 of 30 × T stays out of the means.
	if got := m.MeanP95OverT(); got < 1.0999 || got > 1.1001 {
		t.Errorf("mean p95/T %g, want 1.1", got)
	}
	if got := m.MeanOverPct(); got != 4 {
		t.Errorf("mean over %g %%, want 4", got)
	}
	if got := m.GeoShare(); got < 0.9999 || got > 1.0001 {
		t.Errorf("geometric share %g, want 1 (2 × 0.5 × 1)", got)
	}
}
