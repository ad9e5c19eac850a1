package engine

import "net/netip"

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
//   - Consumers: write-rate and outstanding-write EWMAs, set membership,
//     last write, the delay put on its writes, the returning-writer memory. Always kept: new policy thresholds judge the next
//     tick's rate, and a membership they no longer support ends through
//     the policy's own hysteresis.
//   - Resources: whether the resource was ever measured, and its loop's
//     memory, as control.Loop.Adopt takes it over: the signal, the
//     timers of its rules, the learned headroom, the controller and its
//     ceiling, within what the new settings change.
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
			r.started = o.started
			r.loop.Adopt(o.loop)
			delete(oldRes, r.name) // a duplicate name takes it once, as SetTopology does
		}
		for _, ci := range r.consumers {
			c := &e.cons[ci]
			if oc, ok := oldCons[consKey{r.name, c.c.Device, c.c.Addr}]; ok {
				c.st, c.lastWrite, c.heldMs = oc.st, oc.lastWrite, oc.heldMs
				c.memberAt, c.rejoinSince, c.returning = oc.memberAt, oc.rejoinSince, oc.returning
			}
		}
	}
}
