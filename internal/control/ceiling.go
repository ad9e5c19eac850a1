package control

import "time"

// Authority. A per-packet delay slows each of a writer's I/Os by about
// one delay, so it cuts the writers' rate only as far as their
// concurrency allows: by Little's law, holding a saturated disk's queue
// down takes a delay near the writers' outstanding I/Os times the service
// time, which grows with threads, sessions and queue depth. The ceiling
// therefore starts at Control.UMaxMs (the thesis's range) and, while the
// delay has pressed on it (within pressShare of it) with the read latency
// over the set point and a non-empty set for raiseAfter (raiseAfterFar
// with the latency farOver × the threshold or more), rises by
// raiseFactor, up to UMaxLimitMs;
// it falls back by the same factor after lowerAfter with the delay under
// half of it. Rising by factors keeps TCP's RTT estimate ahead of the
// delay (the data path also limits the rise per packet). A ceiling at the
// limit with the latency still over the threshold is reported as
// saturation: packet delay alone cannot hold these writers.
const (
	raiseAfter = time.Second
	// raiseAfterFar is raiseAfter while the latency is far over (farOver
	// × the threshold or more): a burst's onset. The writers' first tick
	// goes unthrottled (they are seen only once they write) and fills
	// the disk's queue; a delay that only matches their steady need
	// drains that backlog slowly (in the lab's randw run the reader
	// waited 70-170 ms for 2-6 s at every onset with the delay at its
	// 45 ms ceiling). Draining takes more than the steady need, soon.
	// So does a controller still in its first climb (control.Climber):
	// the signal has not once come down to the set point since the burst
	// began, however near it is (at 10 ms the lab's writers need 80-90 ms
	// of delay with the reader at 10-14 ms, under farOver: from the
	// default ceiling of 20 ms, four steps of a second each).
	raiseAfterFar = 300 * time.Millisecond
	farOver       = 2.0
	raiseFactor   = 1.5
	lowerAfter    = 10 * time.Second
	// pressShare is how near the ceiling the delay must be to press on it.
	pressShare = 0.85
)

// DefaultUMaxLimitMs is the default top of the ceiling: far above the
// thesis's 20 ms, yet under Linux's 200 ms minimum retransmission timeout
// plus the RTT the writers already measure, and a thousand times under
// the initiators' 30 s SCSI command timeout.
const DefaultUMaxLimitMs = 200

// scaleCeiling moves the delay ceiling with the writers' need (see
// "Authority") and reports saturation in out.
func (l *Loop) scaleCeiling(o Observation, out *Output) {
	now := o.Now
	base := l.cfg.Params.UMaxMs
	limit := max(l.cfg.UMaxLimitMs, base)
	movable := l.rules.Ceiling
	if !movable {
		limit = base
	}
	if l.ceiling <= 0 {
		l.ceiling = base
	}
	// Pressing: the delay near the ceiling and the latency still over the
	// set point. Near, not at: the P and D terms keep the output a few
	// percent under the clamp from tick to tick while it is not enough.
	atCeiling := l.controlMs >= l.ceiling*pressShare && l.signalMs > l.TargetMs() && o.Members > 0
	if !atCeiling {
		l.satSince = time.Time{}
	} else if l.satSince.IsZero() {
		l.satSince = now
	}
	if l.controlMs >= l.ceiling/2 {
		l.lowSince = time.Time{}
	} else if l.lowSince.IsZero() {
		l.lowSince = now
	}
	after := raiseAfter
	if l.signalMs >= farOver*l.cfg.ThresholdMs || l.rules.FirstClimb && l.pid.Rising() {
		after = raiseAfterFar
	}
	switch {
	case movable && atCeiling && l.ceiling < limit && now.Sub(l.satSince) >= after:
		l.ceiling = min(l.ceiling*raiseFactor, limit)
		l.pid.SetUMax(l.ceiling)
		l.satSince = time.Time{}
	case movable && l.ceiling > base && !l.lowSince.IsZero() && now.Sub(l.lowSince) >= lowerAfter:
		l.ceiling = max(l.ceiling/raiseFactor, base)
		l.pid.SetUMax(l.ceiling)
		l.lowSince = time.Time{}
	}
	out.UMaxMs, out.UMaxLimitMs = l.ceiling, limit
	out.Saturated = atCeiling && l.ceiling >= limit && !l.satSince.IsZero() && now.Sub(l.satSince) >= raiseAfter
}
