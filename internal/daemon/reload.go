package daemon

import (
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// Reload is a new configuration for the running loop (SIGHUP): an engine
// built from it, and for a fixed topology (no discovery) the new one. The
// caller has validated it exactly as 'sanqos run' does at start.
type Reload struct {
	Decider Decider
	// Topology, when set, replaces the fixed topology. Without it the
	// current (discovered) topology is given to the new engine, through
	// Adjust when set (to apply the new per-resource thresholds at once
	// rather than at the next discovery).
	Topology *topology.Topology
	Adjust   func(topology.Topology) topology.Topology
}

// Adopter is a Decider that takes over the state of the Decider it
// replaces at a reload (FromEngine's: engine.Engine.Adopt), so that a
// reload changes what the new settings change and nothing else: the
// signal, the delay, its raised ceiling and the sets go on where they
// were. A Decider that is not one starts at rest.
//
// There is no hold of the old throttles across a reload. One was needed
// while the new engine started at rest, but it could only keep the larger
// of the old and the new delay for as long as reloads kept coming: a
// reload storm froze the delay of the moment the storm began while the
// disk recovered. With the state adopted, the new engine's first decision
// is the old one's next (or, for changed settings, its continuation), so
// it is applied as it is.
type Adopter interface {
	Adopt(old Decider)
}

// Reload hands r to the loop; it takes effect at the next tick. A second
// Reload before that replaces the first.
func (d *Daemon) Reload(r Reload) {
	select {
	case <-d.reloadCh:
	default:
	}
	d.reloadCh <- r
}

// takeReload installs a pending reload, at a tick boundary: the new
// Decider gets the topology, then adopts the old one's state for it.
func (d *Daemon) takeReload(time.Time) {
	var r Reload
	select {
	case r = <-d.reloadCh:
	default:
		return
	}
	topo := d.topo
	if r.Topology != nil {
		topo = *r.Topology
	} else if r.Adjust != nil {
		topo = r.Adjust(topo)
	}
	old := d.o.Decider
	d.o.Decider = r.Decider
	d.swapTopology(topo)
	_, adopted := r.Decider.(Adopter)
	if adopted {
		r.Decider.(Adopter).Adopt(old)
	}
	d.log.Info("configuration reloaded", "resources", len(topo.Resources), "state_kept", adopted)
}

// inForce sets each resource's InForceMs from s, the state the backend
// last applied successfully: the delay of the group of the resource's
// name while it has members.
func inForce(rs []status.Resource, s throttle.State) {
	for i := range rs {
		rs[i].InForceMs = 0
		for _, g := range s.Groups {
			if g.Name == rs[i].Name && len(g.Members) > 0 {
				rs[i].InForceMs = ms(max(g.WriteDelay, g.ReadDelay))
				break
			}
		}
	}
}
