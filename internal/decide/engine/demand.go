package engine

import (
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
)

// Demand. The policy judges a writer held by the throttle by its writes
// outstanding, not by the rate the delay leaves it (policy "Demand"); the
// engine gives it the two things it needs for that. The delay in force on
// a consumer's writes over a tick is the one the previous Step decided
// for it (the interval a Step measures ran under that decision): the
// resource's DelayMs for a member, its ControlMs for a returning writer
// the data path arms (which holds it only once it writes, and only its
// writes count here), 0 otherwise, and 0 when the delay does not slow
// writes (Direction read). And its writes outstanding, by Little's law:
// writes per second times what each takes, the device's write await plus
// that delay. Each write waits for at least one delayed packet (its
// response), so this undercounts when it waits for more (an R2T too):
// the estimate errs towards letting a writer go.

// sample is what the policy judges of consumer c this tick: its write
// rate kbs (the device's or its own on the wire) on device d.
func sample(c *consumer, d *device, kbs float64) policy.Sample {
	s := policy.Sample{WriteKBs: kbs, HeldMs: c.heldMs}
	rt := &d.rates
	if rt.Writes == 0 || d.elapsed <= 0 || !(kbs > 0) {
		return s
	}
	// Writes per second at kbs, with the device's mean write size (the
	// wire's rate has no count of writes; the device's writes have one).
	sizeKB := rt.WriteKBs * d.elapsed / float64(rt.Writes)
	if !(sizeKB > 0) {
		return s
	}
	s.Outstanding = kbs / sizeKB * (rt.WAwaitMs + c.heldMs) / 1000
	return s
}

// noteHeld records, for each of r's consumers, the delay rd puts on its
// writes until the next Step, and shows it in cons.
func (e *Engine) noteHeld(r *resource, rd *ResourceDecision, cons []ConsumerRates) {
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		c.heldMs = 0
		own, isOwn := ownDelay(rd, c.c.Addr)
		switch {
		case e.cfg.Direction&direction.Write == 0:
		case isOwn:
			c.heldMs = own
		case cons[ci].Throttleable && containsAddr(rd.Members, c.c.Addr):
			c.heldMs = rd.DelayMs
		case containsAddr(rd.Returning, c.c.Addr):
			c.heldMs = rd.ControlMs
		}
		cons[ci].HeldMs = c.heldMs
	}
}
