package control

import (
	"math"
	"slices"
	"time"
)

// Headroom. A threshold is a promise about single seconds, and the
// controller holds the signal's mean at its set point: how far single
// seconds stray from that mean is the workload's, not the controller's.
// In the lab the 1-second mean of the signal scatters around the set
// point by 6–10 % (robust σ) with fig5.11's, surge24's and randw's writers
// on iSCSI, and by 21 % on NFS, whose writes land with their journal
// commits in batches; the reader's p95 second at the initiator was the
// set point × (1 + 1.645 σ), and 0.2–0.5 ms more, in the runs of
// 2026-11-26. DefaultHeadroom holds the first; the second needs more.
// With AutoHeadroom each resource measures its own scatter while it holds
// writers and aims where a second's 95th percentile is within p95Margin ×
// threshold and its 98th within overMargin × threshold (the promise's 1.1
// and 1.2, less what the initiator sees beyond the target's disk), never
// closer than DefaultHeadroom: aiming closer on the steady iSCSI
// workloads bought nothing measurable (fig5.11 in full, 2026-11-26, with
// a floor of 0.08: at 15 ms the set point rose to 13.8 ms and the
// reader's p95 from 14.7 to 15.7 ms while the writers stayed at 30.8 MB/s
// against 30.6 and the mean delay at 11.4 ms; at 10 ms 7.0 MB/s against
// 5.8 but a p95 of 10.8 ms of the promised 11; at 20 ms a burst took 4 s
// to settle). So the measured headroom only ever adds margin.
//
// It is opt-in (AutoHeadroom, config headroom = "auto"; the lab's nfs
// experiment sets it): with it on by default, CI's end-to-end fig5.11 run
// once missed the writers' 100 ms throughput CV guarantee (0.27 of 0.25)
// with everything else met, and until that is understood the default
// stays the fixed headroom every earlier run measured.
//
// Only a resource that holds the mean is measured. A p95 or p99 signal
// is already a promise about the tail, and each tick's percentile of a
// handful of reads scatters by its own sampling, not by anything a write
// delay takes away: on the lab's 1 ms flash promise (signal p95) the
// measured headroom went to its ceiling twice in one run and the delay to
// 200 ms, with the writers at 17–26 MB/s against 99 at the default, and
// the seconds within 1.2 ms at 85–86 % as before.
//
// Onsets are not scatter: only seconds in which the controller held a
// delay on writers that wrote, from settleAfter after the set gained
// them, are counted, and the median and median absolute deviation make
// the estimate indifferent to the odd burst left over. The headroom moves
// by at most headroomStep a second, so the set point glides and the
// controller sees no step.

// DefaultHeadroom is where a resource starts, the least it aims below
// the threshold with AutoHeadroom, and what it keeps without: it holds a
// second's p95 near the threshold for a scatter of up to about 10 % (that
// of a 32 IOPS reader under fig5.11's writers), with the initiator seeing
// about 0.5 ms more than the target's devices.
const DefaultHeadroom = 0.15

const (
	// scatterWindow seconds are kept; scatterMin are needed before the
	// headroom moves from its configured start (two of fig5.11's bursts:
	// with 30, NFS's first 100 s ran at the default and held every
	// second over 18 ms of its run).
	scatterWindow = 120
	scatterMin    = 20
	// settleAfter: seconds after the set gained members still count as
	// the onset.
	settleAfter = 3 * time.Second
	// headroomMin and headroomMax bound the measured headroom (see above
	// for the floor).
	headroomMin, headroomMax = DefaultHeadroom, 0.35
	// headroomStep is the largest change of the headroom per second:
	// from the default to NFS's 0.25 in 10 s.
	headroomStep = 0.01
	// p95Margin and overMargin: a held second's p95 and p98 against the
	// threshold (the promise is 1.1 and 1.2; the initiator sees 0.3–0.5 ms
	// more than the disk, 3 % of a 15 ms threshold).
	p95Margin, overMargin = 1.05, 1.15
	// holdTolerance: a loop whose median held second is further over its
	// set point does not hold it (NFS's and iSCSI's were within 7 %, the
	// flash promise's 24 % over).
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
// not holding it: its scatter is not the writers' to take away (the lab's
// 1 ms promise on flash, where single reads of 2–20 ms come from the
// VM's scheduling: the headroom went to its ceiling, the delay to 200 ms,
// the writers from 99 to 17 MB/s, and the seconds within 1.2 ms stayed at
// 86 %), and a lower set point would only press the writers harder; it
// gets the default.
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
// is heavier than normal (the lab's small random writers and NFS: their
// 90th percentile lies further out than 1.28 σ). xs is reordered.
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
