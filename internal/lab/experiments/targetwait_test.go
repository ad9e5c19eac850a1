package experiments

import (
	"math"
	"testing"
)

func TestTargetWaits(t *testing.T) {
	nan := math.NaN()
	tl := Timeline{
		T:      []float64{1, 2, 3, 4},
		WaitMs: []float64{1, 3, nan, 4},
		Active: []bool{false, true, true, true},
	}
	secs := tl.activeSeconds()
	if len(secs) != 2 || secs[0] != 1 || secs[1] != 3 {
		t.Fatalf("activeSeconds = %v, want [1 3]: active, with a sample of the reader", secs)
	}
	ticks := []Tick{
		{T: 0.5, RawMs: 9, Reads: 3}, // second 1: not judged
		// Second 2, (1, 2]: one read at 4 ms and three at 0 ms weigh 1 ms;
		// a tick at its end belongs to it, one without reads counts
		// nothing.
		{T: 1.1, RawMs: 4, Reads: 1},
		{T: 1.5, RawMs: 0, Reads: 3},
		{T: 1.7, RawMs: 50, Reads: 0},
		{T: 2.0, RawMs: 1, Reads: 0},
		{T: 2.5, RawMs: 8, Reads: 4}, // second 3: the reader has no sample
		// Second 4, (3, 4]: nothing counted, so left out.
		{T: 3.5, RawMs: 7, Reads: 0},
	}
	got := targetWaits(ticks, tl, secs, true)
	if got == nil || got.N != 1 || got.Mean != 1 {
		t.Fatalf("targetWaits = %+v, want one second of 1 ms", got)
	}
	ticks = append(ticks, Tick{T: 4, RawMs: 3, Reads: 2})
	if got := targetWaits(ticks, tl, secs, true); got == nil || got.N != 2 || got.Max != 3 || got.Mean != 2 {
		t.Errorf("targetWaits = %+v, want seconds of 1 and 3 ms", got)
	}
	if got := targetWaits(ticks, tl, []int{1, 2, 3}, true); got == nil || got.N != 2 {
		t.Errorf("targetWaits = %+v, want second 3 left out: the reader has no sample in it", got)
	}
	if got := targetWaits(nil, tl, secs, true); got != nil {
		t.Errorf("targetWaits without ticks = %+v, want nil", got)
	}
	// Where the probe timed the reads, their mean counts, not a raw
	// signal a read long in flight has raised; a percentile signal
	// without the probe's mean says nothing of a mean.
	probed := []Tick{{T: 1.5, RawMs: 400, MeanMs: 2, Reads: 3}}
	if got := targetWaits(probed, tl, secs, false); got == nil || got.Mean != 2 {
		t.Errorf("targetWaits of a probed tick = %+v, want its completed reads' 2 ms", got)
	}
	if got := targetWaits([]Tick{{T: 1.5, RawMs: 9, Reads: 3}}, tl, secs, false); got != nil {
		t.Errorf("targetWaits of a p95 signal without the probe's mean = %+v, want nil", got)
	}
}
