package engine

import (
	"time"

	"github.com/sanqos/sanqos/internal/control"
)

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

// scaleCeiling moves r's delay ceiling with the writers' need (see
// "Authority") and reports saturation in rd.
func (e *Engine) scaleCeiling(r *resource, rd *ResourceDecision, now time.Time) {
	base := e.cfg.Control.UMaxMs
	limit := max(e.cfg.UMaxLimitMs, base)
	c, movable := r.ctrl.(control.Ceiling)
	if !movable {
		limit = base
	}
	if r.ceiling <= 0 {
		r.ceiling = base
	}
	// Pressing: the delay near the ceiling and the latency still over the
	// set point. Near, not at: the P and D terms keep the output a few
	// percent under the clamp from tick to tick while it is not enough
	// (the lab's 24 sequential writers held it at 17-20 ms of 20 with the
	// latency at 15-39 ms for 40 s before "at" was true for a second).
	atCeiling := r.controlMs >= r.ceiling*pressShare && r.signalMs > r.targetMs() && len(rd.Members) > 0
	if !atCeiling {
		r.satSince = time.Time{}
	} else if r.satSince.IsZero() {
		r.satSince = now
	}
	if r.controlMs >= r.ceiling/2 {
		r.lowSince = time.Time{}
	} else if r.lowSince.IsZero() {
		r.lowSince = now
	}
	after := raiseAfter
	if cl, ok := r.ctrl.(control.Climber); r.signalMs >= farOver*r.threshold || ok && cl.Rising() {
		after = raiseAfterFar
	}
	switch {
	case movable && atCeiling && r.ceiling < limit && now.Sub(r.satSince) >= after:
		r.ceiling = min(r.ceiling*raiseFactor, limit)
		c.SetUMax(r.ceiling)
		r.satSince = time.Time{}
	case movable && r.ceiling > base && !r.lowSince.IsZero() && now.Sub(r.lowSince) >= lowerAfter:
		r.ceiling = max(r.ceiling/raiseFactor, base)
		c.SetUMax(r.ceiling)
		r.lowSince = time.Time{}
	}
	rd.UMaxMs, rd.UMaxLimitMs = r.ceiling, limit
	rd.Saturated = atCeiling && r.ceiling >= limit && !r.satSince.IsZero() && now.Sub(r.satSince) >= raiseAfter
}
