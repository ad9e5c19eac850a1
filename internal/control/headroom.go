package control

import (
	"math"
	"slices"
	"time"
)

// Headroom (step 7 of the law, doc.go): the set point lies a headroom
// below the threshold, since the promise is about single seconds and the
// controller holds their mean. With AutoHeadroom (opt-in), a loop that
// holds the mean measures its seconds' scatter around the set point and
// adds margin for it; it never aims closer than DefaultHeadroom.

// DefaultHeadroom is where a resource starts, the least it aims below
// the threshold with AutoHeadroom, and what it keeps without: it holds a
// second's p95 near the threshold for a scatter of up to about 10 %, with
// the initiator seeing about 0.5 ms more than the target's devices.
const DefaultHeadroom = 0.15

const (
	// scatterWindow seconds are kept; scatterMin are needed before the
	// headroom moves from its configured start (about two bursts of the
	// thesis's workload).
	scatterWindow = 120
	scatterMin    = 20
	// settleAfter: seconds after the set gained members still count as
	// the onset.
	settleAfter = 3 * time.Second
	// headroomMin and headroomMax bound the measured headroom: it only
	// ever adds margin, and never takes more than a third of the promise.
	headroomMin, headroomMax = DefaultHeadroom, 0.35
	// headroomStep is the largest change of the headroom per second, so
	// the set point glides and the controller sees no step.
	headroomStep = 0.01
	// p95Margin and overMargin: a held second's p95 and p98 against the
	// threshold: the promise's 1.1 and 1.2, less what the initiator sees
	// beyond the target's disk.
	p95Margin, overMargin = 1.05, 1.15
	// holdTolerance: a loop whose median held second is further over its
	// set point does not hold it, and its scatter is not the writers'.
	holdTolerance = 0.1
	// z95 and z98 are the standard normal quantiles of those percentiles.
	z95, z98 = 1.645, 2.054
)

// scatter measures a resource's 1-second signal around its set point.
type scatter struct {
	// sec is the start of the second being summed; sum/n its ticks' raw
	// signal; held that every tick of it so far held writers.
	sec   time.Time
	sum   float64
	n     int
	held  bool
	since time.Time // when the set last gained members (zero: empty)
	devs  []float64 // relative deviations of held seconds, a ring
	next  int
}

// headroomFor returns the headroom that keeps seconds at median m and
// scatter s (both relative to the set point) within the margins. A loop
// whose median second is more than holdTolerance over its set point is
// not holding it: its scatter is not the writers' to take away, and a
// lower set point would only press the writers harder; it gets the
// default.
func headroomFor(m, s float64) float64 {
	if m > holdTolerance {
		return headroomMin
	}
	m = math.Max(m, 0) // a loop below its set point is not credited
	h := math.Max(1-p95Margin/(1+m+z95*s), 1-overMargin/(1+m+z98*s))
	return min(max(h, headroomMin), headroomMax)
}

// robust returns the median of xs and their scatter: 1.4826 × the median
// absolute deviation (σ for normal scatter), or more where the upper tail
// is heavier than normal (its 90th percentile further out than 1.28 σ,
// as with small random writers and NFS). xs is reordered.
func robust(xs []float64) (med, sigma float64) {
	slices.Sort(xs)
	med = median(xs)
	q90 := xs[(len(xs)-1)*9/10]
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - med)
	}
	slices.Sort(dev)
	return med, math.Max(1.4826*median(dev), (q90-med)/1.2816)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// adaptHeadroom adds this tick to the scatter and, at each new second,
// moves the headroom toward what the scatter asks for. A second counts if
// in every tick of it the controller held a delay on writers that wrote,
// past the onset; its value is the mean of its ticks that completed reads
// (a reader slower than a tick leaves some without).
func (l *Loop) adaptHeadroom(o Observation, out *Output) {
	now := o.Now
	sc := &l.scatter
	switch {
	case o.Members == 0:
		sc.since = time.Time{}
	case sc.since.IsZero():
		sc.since = now
	}
	if !l.cfg.AutoHeadroom || l.cfg.Signal != SignalMean {
		return
	}
	if now.Sub(sc.sec) >= time.Second || now.Before(sc.sec) {
		// The headroom moves only here, so the second was judged against
		// the set point it still has.
		if sc.held && sc.n > 0 {
			l.addScatter(sc.sum/float64(sc.n)/l.TargetMs() - 1)
		}
		sc.sec, sc.sum, sc.n, sc.held = now, 0, 0, true
	}
	raw := 0.0
	if o.Measured && o.Reads {
		raw = o.RawMs
	}
	held := o.Members > 0 && !out.Armed && out.ControlMs > 0 && now.Sub(sc.since) >= settleAfter
	sc.held = sc.held && held
	if held && raw > 0 {
		sc.sum += raw
		sc.n++
	}
}

// addScatter records one held second's deviation and steps the headroom.
func (l *Loop) addScatter(dev float64) {
	sc := &l.scatter
	if len(sc.devs) < scatterWindow {
		sc.devs = append(sc.devs, dev)
	} else {
		sc.devs[sc.next] = dev
		sc.next = (sc.next + 1) % scatterWindow
	}
	if len(sc.devs) < scatterMin || !l.rules.Retarget {
		return // the thesis's controller keeps the set point it was built with
	}
	m, s := robust(slices.Clone(sc.devs))
	want := headroomFor(m, s)
	h := l.headroom + max(min(want-l.headroom, headroomStep), -headroomStep)
	if h == l.headroom {
		return
	}
	l.headroom = h
	l.pid.Retarget(l.TargetMs())
}

// Headroom is the fraction of the threshold the set point lies below it.
func (l *Loop) Headroom() float64 { return l.headroom }
