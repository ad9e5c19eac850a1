package daemon

import (
	"time"

	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
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

// reloadHold is how long after a reload the throttles in force are kept
// while the new engine, which starts at rest, measures: its EWMA (α 0.25
// at 100 ms) needs about a second to say what the old one knew.
const reloadHold = time.Second

// Reload hands r to the loop; it takes effect at the next tick. A second
// Reload before that replaces the first.
func (d *Daemon) Reload(r Reload) {
	select {
	case <-d.reloadCh:
	default:
	}
	d.reloadCh <- r
}

// takeReload installs a pending reload, at a tick boundary.
func (d *Daemon) takeReload(now time.Time) {
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
	d.o.Decider = r.Decider
	d.topo = topology.Topology{} // so that swapTopology logs the difference against nothing
	d.swapTopology(topo)
	d.holdUntil = now.Add(reloadHold)
	d.log.Info("configuration reloaded; throttles in force are kept while the new settings measure",
		"resources", len(topo.Resources), "hold", reloadHold)
}

// holdThrottles keeps, for reloadHold after a reload, every group of the
// last applied state whose delays the new decision would lower: a reload
// must not release a writer that the old settings were holding back.
func (d *Daemon) holdThrottles(now time.Time, s throttle.State) throttle.State {
	if d.holdUntil.IsZero() || !now.Before(d.holdUntil) {
		d.holdUntil = time.Time{}
		return s
	}
	out := throttle.State{Groups: make([]throttle.Group, 0, len(s.Groups))}
	seen := map[string]bool{}
	old := map[string]throttle.Group{}
	for _, g := range d.applied.Groups {
		old[g.Name] = g
	}
	for _, g := range s.Groups {
		seen[g.Name] = true
		if o, ok := old[g.Name]; ok && o.WriteDelay+o.ReadDelay > g.WriteDelay+g.ReadDelay {
			g = o
		}
		out.Groups = append(out.Groups, g)
	}
	for _, g := range d.applied.Groups {
		if !seen[g.Name] && g.WriteDelay+g.ReadDelay > 0 && len(g.Members) > 0 {
			out.Groups = append(out.Groups, g)
		}
	}
	return out
}
