// Package smoothing turns noisy per-tick measurements into the smooth signal
// the controller acts on: an EWMA (the thesis's filter, with its decay
// toward zero on idle ticks) and the request-weighted read latency of a
// resource over its devices.
package smoothing

import "fmt"

// ThesisAlpha is the EWMA weight of the thesis (Listings C.2, C.3): with a
// 100 ms tick a step change is 90 % through after about 0.8 s, smoothing
// single slow reads without hiding a saturation for long.
const ThesisAlpha = 0.25

// EWMA is an exponentially weighted moving average starting at 0, as in
// the thesis. Starting at 0 rather than at the first sample means a single
// slow first tick cannot trigger throttling. The zero value has alpha 0
// and never moves; use NewEWMA.
type EWMA struct {
	alpha float64
	value float64
}

// NewEWMA returns an EWMA with weight alpha in (0, 1].
func NewEWMA(alpha float64) (*EWMA, error) {
	if err := CheckAlpha(alpha); err != nil {
		return nil, err
	}
	return &EWMA{alpha: alpha}, nil
}

// NewEWMAAt returns an EWMA with weight alpha that stands at value: an
// average carried over to a new weight (a reloaded configuration) goes
// on from where it was instead of from 0.
func NewEWMAAt(alpha, value float64) (*EWMA, error) {
	e, err := NewEWMA(alpha)
	if err != nil {
		return nil, err
	}
	e.value = value
	return e, nil
}

// CheckAlpha reports whether alpha is a usable EWMA weight.
func CheckAlpha(alpha float64) error {
	if !(alpha > 0 && alpha <= 1) {
		return fmt.Errorf("EWMA alpha %v: want a value in (0, 1], e.g. %v", alpha, ThesisAlpha)
	}
	return nil
}

// Update folds sample x in: e ← e + α·(x − e).
func (e *EWMA) Update(x float64) float64 {
	e.value += e.alpha * (x - e.value)
	return e.value
}

// Decay is the thesis's step for a tick with no sample (Listing C.3:
// e ← e − α·e): with no reads there is no latency to report, and letting
// the average fall means an idle resource is never throttled on old news.
func (e *EWMA) Decay() float64 {
	e.value -= e.alpha * e.value
	return e.value
}

// Value is the current average.
func (e *EWMA) Value() float64 { return e.value }

// Alpha is the weight of a new sample.
func (e *EWMA) Alpha() float64 { return e.alpha }

// Reset returns the average to 0.
func (e *EWMA) Reset() { e.value = 0 }

// ReadLatency aggregates one tick's read latency over a resource's
// devices: Σ Δread_ms / Σ Δreads. Weighting by requests means a device
// with many reads counts for what its readers actually waited, while an
// idle device (no reads) adds nothing rather than a zero. Zero value ready.
type ReadLatency struct {
	ms    float64
	reads uint64
	// pendingMs and pending are reads still in flight, each counted as
	// one read of (at least) its age so far: a read slower than a tick is
	// evidence of slowness before it completes.
	pendingMs float64
	pending   uint64
}

// Add adds one device's reads and read milliseconds of the tick.
func (a *ReadLatency) Add(reads, readMs uint64) {
	a.reads += reads
	a.ms += float64(readMs)
}

// AddMicros adds one device's reads and their latency sum in
// microseconds (the block-layer probe's resolution).
func (a *ReadLatency) AddMicros(reads uint64, us int64) {
	a.reads += reads
	a.ms += float64(us) / 1000
}

// AddPending adds one read still in flight that is at least ageMs old.
func (a *ReadLatency) AddPending(ageMs float64) {
	a.pending++
	a.pendingMs += ageMs
}

// Reads is the number of completed reads added.
func (a *ReadLatency) Reads() uint64 { return a.reads }

// Value is the mean read latency in ms over the completed reads and the
// pending ones at their age; ok is false when there was neither.
func (a *ReadLatency) Value() (ms float64, ok bool) {
	n := a.reads + a.pending
	if n == 0 {
		return 0, false
	}
	return (a.ms + a.pendingMs) / float64(n), true
}

// Reset clears the aggregate for the next tick.
func (a *ReadLatency) Reset() { *a = ReadLatency{} }
