package engine

import (
	"net/netip"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/smoothing"
)

// Reloads. A reload (SIGHUP) builds a new engine from the new
// configuration; Adopt gives it the running engine's memory, so that the
// reload changes what the new settings change and nothing else. A new
// engine at rest would measure nothing at its first Step (no previous
// counters), release every set, re-learn the delay from the floor and
// re-raise its ceiling by factors: seconds in which the writers the old
// settings held go through. What is kept, and what a changed setting
// resets:
//
//   - Devices: last counters, reads in flight, probe trust. They describe
//     the device, not the settings: always kept.
//   - Consumers: write-rate EWMA, set membership, last write, the
//     returning-writer memory. Always kept: new policy thresholds judge the next
//     tick's rate, and a membership they no longer support ends through
//     the policy's own hysteresis.
//   - Resources (carry): the signal (its EWMA re-weighted when Alpha
//     changed), the onset, wind-down and ceiling timers. The learned
//     headroom while the headroom settings and the statistic are the
//     same. The controller while its law and gains are the same, moved to
//     a new set point (threshold, headroom) without a kick where it can be
//     (control.Retargeter), else started at rest; a controller rebuilt for
//     new gains starts from the delay in force (control.Setter); either
//     takes the signal as its error history against the new set point
//     (control.Rebaser). The ceiling, within the new settings' bounds.
//
// The same carry applies when discovery changes a resource's threshold
// within one engine (SetTopology).

// Adopt takes over old's state for every device, consumer and resource
// that e's topology shares with old's (by name; consumers by resource,
// address and device), as "Reloads" describes. e must not have stepped
// yet; old must not be used afterwards (e takes some of its state over
// rather than copying it).
func (e *Engine) Adopt(old *Engine) {
	if old == nil || old == e {
		return
	}
	for i := range e.devs {
		if oi, ok := old.devIdx[e.devs[i].name]; ok {
			e.devs[i] = old.devs[oi]
		}
	}
	// Device freshness (seenGen) counts old's Steps.
	e.gen = max(e.gen, old.gen)

	type consKey struct {
		res, dev string
		addr     netip.Addr
	}
	oldCons := make(map[consKey]*consumer, len(old.cons))
	oldRes := make(map[string]*resource, len(old.res))
	for ri := range old.res {
		r := &old.res[ri]
		if _, dup := oldRes[r.name]; !dup {
			oldRes[r.name] = r
		}
		for _, ci := range r.consumers {
			c := &old.cons[ci]
			oldCons[consKey{r.name, c.c.Device, c.c.Addr}] = c
		}
	}
	for ri := range e.res {
		r := &e.res[ri]
		if o, ok := oldRes[r.name]; ok {
			e.carry(r, o, old.cfg)
			delete(oldRes, r.name) // a duplicate name takes it once, as SetTopology does
		}
		for _, ci := range r.consumers {
			c := &e.cons[ci]
			if oc, ok := oldCons[consKey{r.name, c.c.Device, c.c.Addr}]; ok {
				c.st, c.lastWrite = oc.st, oc.lastWrite
				c.memberAt, c.rejoinSince, c.returning = oc.memberAt, oc.rejoinSince, oc.returning
			}
		}
	}
}

// carry moves old's state into r, a resource at rest built for e's
// settings, where was are the settings old was built with (see
// "Reloads").
func (e *Engine) carry(r, old *resource, was Config) {
	now := e.cfg
	r.ewma, r.signalMs = old.ewma, old.signalMs
	if was.Alpha != now.Alpha {
		r.ewma, _ = smoothing.NewEWMAAt(now.Alpha, old.ewma.Value()) // alpha validated in New
	}
	// A new statistic (mean to p95, say) starts from the old one's value:
	// the nearest estimate there is.
	r.started, r.lastSample, r.emptySince = old.started, old.lastSample, old.emptySince
	r.onset, r.burst, r.satSince, r.lowSince = old.onset, old.burst, old.satSince, old.lowSince
	if was.Headroom == now.Headroom && was.AutoHeadroom == now.AutoHeadroom && old.signal == r.signal {
		r.headroom, r.scatter = old.headroom, old.scatter
	}
	target := r.targetMs()

	base := now.Control.UMaxMs
	limit := max(now.UMaxLimitMs, base)
	out, rebase := 0.0, false
	switch {
	case was.Controller == now.Controller && sameGains(was.Control, now.Control):
		r.ctrl, r.frozen, out = old.ctrl, old.frozen, old.controlMs
		if target == old.targetMs() {
			break
		}
		if rt, ok := r.ctrl.(control.Retargeter); ok {
			rt.Retarget(target)
			rebase = true
		} else {
			// The thesis's controller keeps the set point it was built
			// with: a new one, at rest.
			r.ctrl, r.frozen, out = e.newController(target), false, 0
		}
	default:
		// New gains or another law: a new controller that goes on from
		// the delay in force.
		r.ctrl, r.frozen = e.newController(target), old.frozen
		if _, ok := r.ctrl.(control.Setter); ok {
			out = old.controlMs
		}
		rebase = true
	}
	if rb, ok := r.ctrl.(control.Rebaser); ok && rebase {
		// The signal becomes the error history against the new set
		// point, as if it had been there all along, capped as pid caps
		// its error: uncapped, a signal many times over the set point
		// would read at the first step as a fall to the cap and take the
		// delay away.
		sig := r.signalMs
		if c := now.Control.ErrCap; c > 0 {
			sig = min(sig, (1+c)*target)
		}
		rb.Rebase(sig)
	}
	r.ceiling = base
	if c, ok := r.ctrl.(control.Ceiling); ok {
		r.ceiling = min(max(old.ceiling, base), limit)
		c.SetUMax(r.ceiling)
	}
	r.controlMs = min(out, r.ceiling)
	if s, ok := r.ctrl.(control.Setter); ok && r.ctrl != old.ctrl {
		r.controlMs = s.SetOutput(r.controlMs)
	}
}

// newController returns e's controller at rest with set point target.
func (e *Engine) newController(target float64) control.Controller {
	p := e.cfg.Control
	p.TargetMs = target
	c, _ := control.New(e.cfg.Controller, p) // validated in New
	return c
}

// sameGains reports whether a controller built with a runs as one built
// with b would, but for its set point (which Retarget moves).
func sameGains(a, b control.Params) bool {
	a.TargetMs, b.TargetMs = 0, 0
	return a == b
}
