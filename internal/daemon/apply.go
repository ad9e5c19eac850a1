package daemon

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// applyTimeout bounds one Apply: iptables waits up to a few seconds for
// the xtables lock; beyond 5 s something is wrong and the next tick retries.
const applyTimeout = 5 * time.Second

// apply hands s to the backend unless it is what the backend already has.
func (d *Daemon) apply(ctx context.Context, s throttle.State) error {
	d.renew(ctx)
	d.takeRepair()
	if !d.needsResync && stateEqual(s, d.applied) {
		return nil
	}
	// A hung kernel call (a held xtables lock, say) must not stall the
	// loop for good: give up after applyTimeout and retry at the next tick.
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	err := d.o.Backend.Apply(actx, s)
	cancel()
	var refused *throttle.Refused
	if errors.As(err, &refused) {
		// The backend applied the rest (an IPv6 consumer on a tc backend,
		// say): the others are controlled; say what was left out when it
		// changes, not every tick.
		if msg := refused.Error(); msg != d.refused {
			d.log.Warn("the backend left part of the throttle state out; the rest is in force", "backend", d.o.Backend.Name(), "left_out", msg)
			d.refused = msg
		}
		err = nil
	} else if err == nil {
		d.refused = ""
	}
	d.metrics.Applied(err)
	if err != nil && ctx.Err() != nil {
		// Stopping: the apply was cut short, and Close removes everything.
		return err
	}
	if err != nil {
		d.needsResync = true
		if !d.applyFailing {
			d.log.Error("applying the throttle state failed; retrying every tick",
				"backend", d.o.Backend.Name(), "err", err)
		}
		d.applyFailing = true
		return err
	}
	if d.applyFailing {
		d.log.Info("throttle state applied again after failures", "backend", d.o.Backend.Name())
	}
	d.applyFailing = false
	d.needsResync = false
	d.applied = cloneState(s)
	d.mu.Lock()
	d.appliedView = d.applied
	d.mu.Unlock()
	return nil
}

// renew keeps a Renewer backend's delays alive for one more TTL: every
// tick, so that they lapse on their own when the loop stops (a dead or
// stuck daemon fails open). A failure is logged when it starts.
func (d *Daemon) renew(ctx context.Context) {
	r, ok := d.o.Backend.(throttle.Renewer)
	if !ok {
		return
	}
	err := r.Renew(ctx)
	if err != nil && !d.renewFailing {
		d.log.Error("renewing the throttles failed; they lapse unless the next tick renews them", "backend", d.o.Backend.Name(), "err", err)
	}
	d.renewFailing = err != nil
}

// mergeOverrides returns s with the manual groups added and their members
// taken out of s's groups, so no initiator is in two groups.
func mergeOverrides(s throttle.State, manual []throttle.Group) throttle.State {
	if len(manual) == 0 {
		return s
	}
	taken := make(map[netip.Addr]bool, len(manual))
	names := make(map[string]bool, len(manual))
	for _, g := range manual {
		names[g.Name] = true
		for _, m := range g.Members {
			taken[m] = true
		}
	}
	out := throttle.State{Groups: make([]throttle.Group, 0, len(s.Groups)+len(manual))}
	for _, g := range s.Groups {
		if names[g.Name] {
			// A manual group of the same name replaces it (a stale group of
			// a freed override in the release state, say).
			continue
		}
		if slices.ContainsFunc(g.Members, func(a netip.Addr) bool { return taken[a] }) {
			g.Members = slices.DeleteFunc(slices.Clone(g.Members), func(a netip.Addr) bool { return taken[a] })
		}
		if slices.ContainsFunc(g.Armed, func(a netip.Addr) bool { return taken[a] }) {
			g.Armed = slices.DeleteFunc(slices.Clone(g.Armed), func(a netip.Addr) bool { return taken[a] })
		}
		out.Groups = append(out.Groups, g)
	}
	return throttle.State{Groups: append(out.Groups, manual...)}
}

// stateEqual compares two throttle states exactly (order included: the
// engine produces a stable order, and a reordering costs one idempotent
// Apply at most).
func stateEqual(a, b throttle.State) bool {
	return slices.EqualFunc(a.Groups, b.Groups, func(x, y throttle.Group) bool {
		return x.Name == y.Name && x.WriteDelay == y.WriteDelay && x.ReadDelay == y.ReadDelay && x.ReadRate == y.ReadRate &&
			slices.Equal(x.Members, y.Members) && slices.Equal(x.Ports, y.Ports) &&
			x.ArmedDelay == y.ArmedDelay && slices.Equal(x.Armed, y.Armed)
	})
}

func cloneState(s throttle.State) throttle.State {
	c := throttle.State{Groups: make([]throttle.Group, len(s.Groups))}
	for i, g := range s.Groups {
		g.Members = slices.Clone(g.Members)
		g.Armed = slices.Clone(g.Armed)
		g.Ports = slices.Clone(g.Ports)
		c.Groups[i] = g
	}
	return c
}

// consumersInForce sets each consumer's InForceMs from held, what the
// backend holds each address at (throttle.InForce).
func consumersInForce(cs []status.Consumer, held map[netip.Addr]time.Duration) {
	for i := range cs {
		cs[i].InForceMs = 0
		if a, err := netip.ParseAddr(cs[i].Addr); err == nil {
			cs[i].InForceMs = ms(held[a.Unmap()])
		}
	}
}
