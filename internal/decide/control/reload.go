package control

import "github.com/sanqos/sanqos/internal/decide/smoothing"

// Adopt takes over old's memory for l, a loop at rest built for new
// settings, as a reload or a new threshold from discovery does (see
// "Reloads" in doc.go): the signal (its EWMA re-weighted when Alpha
// changed), the armed and ceiling timers; the controller while its law and gains are the same, moved to the new
// set point without a kick (Retarget), else rebuilt at rest; either
// takes the signal as its error history against the new set point
// (Rebase). The ceiling, within the new settings' bounds.
// old must not be used afterwards.
func (l *Loop) Adopt(old *Loop) { l.adopt(old, true) }

// adopt is Adopt; smooth false leaves the error history against the old
// set point, so that the controller answers the new one as a step of its
// error (see SetThreshold).
func (l *Loop) adopt(old *Loop, smooth bool) {
	if old == nil || old == l {
		return
	}
	was, now := old.cfg, l.cfg
	l.ewma, l.signalMs = old.ewma, old.signalMs
	if was.Alpha != now.Alpha {
		l.ewma, _ = smoothing.NewEWMAAt(now.Alpha, old.ewma.Value()) // alpha validated in NewLoop
	}
	// A new statistic (mean to p95, say) starts from the old one's value:
	// the nearest estimate there is.
	l.lastSample, l.emptySince, l.held = old.lastSample, old.emptySince, old.held
	l.recallMs, l.recallAt = old.recallMs, old.recallAt
	l.satSince, l.lowSince = old.satSince, old.lowSince
	l.gain = old.gain // what the delay buys is the plant's, not the settings'
	target := l.TargetMs()

	base := now.Params.UMaxMs
	limit := max(now.UMaxLimitMs, base)
	out, rebase := 0.0, false
	switch {
	case was.Law == now.Law && sameGains(was.Params, now.Params):
		l.ctrl, l.pid, l.frozen, out = old.ctrl, old.pid, old.frozen, old.controlMs
		if target == old.TargetMs() {
			break
		}
		switch {
		case l.rules.Retarget && !smooth:
			l.pid.StepTarget(target)
		case l.rules.Retarget:
			l.pid.Retarget(target)
			rebase = true
		default:
			// The thesis's controller keeps the set point it was built
			// with: a new one, at rest.
			l.build() // the law and its params were valid in NewLoop
			l.frozen, out = false, 0
		}
	default:
		// New gains or another law: a new controller, at rest.
		l.build()
		l.frozen = old.frozen
		rebase = true
	}
	if l.rules.Rebase && rebase && smooth {
		// The signal becomes the error history against the new set
		// point, as if it had been there all along.
		l.pid.Rebase(l.signalMs)
	}
	l.ceiling = base
	if l.rules.Ceiling {
		l.ceiling = min(max(old.ceiling, base), limit)
		l.pid.SetUMax(l.ceiling)
	}
	l.controlMs = min(out, l.ceiling)
}

// sameGains reports whether a controller built with a runs as one built
// with b would, but for its set point (which Retarget moves).
func sameGains(a, b Params) bool {
	a.TargetMs, b.TargetMs = 0, 0
	return a == b
}

// SetThreshold moves the loop to a new threshold as a reload would
// (Adopt): the signal, the ceiling and the controller are kept. The
// engine calls it when a tenant's own read promise becomes, or stops
// being, the strictest among the resource's active readers. A looser
// threshold moves the set point without a kick, as a reload does. A
// stricter one does not: the reader that asks for it is reading now,
// behind writers held for the looser promise, and the controller answers
// it as it answers a step of the latency (its proportional part at once)
// instead of integrating its way down over seconds of that reader's
// reads. A threshold NewLoop would refuse is ignored: the loop keeps the
// one it has.
func (l *Loop) SetThreshold(ms float64) {
	if ms == l.cfg.ThresholdMs {
		return
	}
	cfg := l.cfg
	cfg.ThresholdMs = ms
	nl, err := NewLoop(cfg)
	if err != nil || !(ms > 0) {
		return
	}
	nl.adopt(l, ms > l.cfg.ThresholdMs)
	*l = *nl
}

// ThresholdMs is the threshold the loop holds now.
func (l *Loop) ThresholdMs() float64 { return l.cfg.ThresholdMs }
