package throttle

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/act/plan"
)

// InForce returns the delay each consumer's flows get from b once it has
// applied s (the daemon passes the last state applied successfully): a
// member of an active group its group's delay (the larger direction's),
// a consumer the group arms its ArmedDelay, from its first write. It is
// what b programs of s, not what was asked: the IPv4-only backends
// (netem, htb) leave IPv6 consumers out, nfqueue leaves them out when
// ip6tables is missing, only nfqueue and edt arm, and dry-run holds
// nobody. So
// a consumer the engine holds at one delay and the data path at another,
// or not at all, shows as such (issue 33). The ramp of nfqueue and edt
// (RiseLimit) is left out: it reaches a new delay within a tick.
func InForce(b Backend, s State) map[netip.Addr]time.Duration {
	switch b := b.(type) {
	case *Composite:
		return InForce(b.Delay, s)
	case *Nfqueue:
		s = b.Programs(s)
	case *Netem, *HTB:
		s, _ = plan.Split(s)
	case *DryRun:
		return map[netip.Addr]time.Duration{}
	}
	return consumerDelays(s)
}

// consumerDelays lists the delay s puts on each consumer's flows.
func consumerDelays(s State) map[netip.Addr]time.Duration {
	out := map[netip.Addr]time.Duration{}
	for _, g := range s.Groups {
		if g.Active() {
			for _, a := range g.Members {
				out[a.Unmap()] = max(out[a.Unmap()], g.WriteDelay, g.ReadDelay)
			}
		}
	}
	for _, g := range s.Groups {
		if !g.Arms() {
			continue
		}
		for _, a := range g.Armed {
			if _, member := out[a.Unmap()]; !member {
				out[a.Unmap()] = g.ArmedDelay
			}
		}
	}
	return out
}
