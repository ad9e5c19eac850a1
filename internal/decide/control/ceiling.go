package control

import "time"

// The ceiling (step 4 of the law, doc.go): the delay's clamp follows the
// writers' need, since a per-packet delay cuts a writer's rate only as
// far as its concurrency allows.
const (
	// raiseAfter: the delay pressed on the ceiling this long rises it.
	raiseAfter = time.Second
	// raiseAfterFar is raiseAfter far over (farOver × the threshold):
	// a burst's backlog drains only with more than the writers' steady
	// need, soon.
	raiseAfterFar = 300 * time.Millisecond
	farOver       = 2.0
	// raiseFactor: by factors, so TCP's RTT estimate keeps ahead of it.
	raiseFactor = 1.5
	// lowerAfter: the ceiling falls after this long under half of it.
	lowerAfter = 10 * time.Second
	// pressShare is how near the ceiling the delay must be to press on
	// it: the P and D terms keep the output a few percent under the clamp
	// from tick to tick while it is not enough.
	pressShare = 0.85
)

// DefaultUMaxLimitMs is the default top of the ceiling: far above the
// thesis's 20 ms, yet under Linux's 200 ms minimum retransmission timeout
// plus the RTT the writers already measure, and a thousand times under
// the initiators' 30 s SCSI command timeout.
const DefaultUMaxLimitMs = 200

// scaleCeiling moves the delay ceiling with the writers' need and
// reports saturation in out.
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
	// set point (see pressShare).
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
	if l.rules.FarRaise && l.signalMs >= farOver*l.cfg.ThresholdMs {
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
