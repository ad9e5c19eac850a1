package daemon

import (
	"context"
	"fmt"
	"slices"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

type topoChange struct {
	topo topology.Topology
}

// discoveryLoop asks the discoverer every interval and hands a changed
// topology to the tick loop.
func (d *Daemon) discoveryLoop(ctx context.Context, last topology.Topology, haveLast bool) {
	t := d.o.Clock.NewTicker(d.o.DiscoveryInterval)
	defer t.Stop()
	failing := !haveLast // the first discovery, in Run, failed and said so
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		topo, ok := d.discover(ctx, last, failing)
		failing = !ok
		if !ok || (haveLast && topologyEqual(topo, last)) {
			continue
		}
		last, haveLast = topo, true
		// Newest wins: drop a change the tick loop has not taken yet.
		select {
		case <-d.topoCh:
		default:
		}
		d.topoCh <- topoChange{topo: topo}
	}
}

// discover runs one discovery and records its outcome. A failure is logged
// when a streak starts (failing false), not on every retry.
func (d *Daemon) discover(ctx context.Context, last topology.Topology, failing bool) (topology.Topology, bool) {
	topo, err := d.o.Discoverer.Discover(ctx)
	d.metrics.Discovered(err)
	now := d.o.Clock.Now()
	var unresolved []string
	if ur, ok := d.o.Discoverer.(UnresolvedReporter); ok && err == nil {
		unresolved = ur.Unresolved()
	}
	d.mu.Lock()
	if err != nil {
		d.disc.OK = false
		d.disc.LastError = err.Error()
		d.disc.Errors++
	} else {
		d.disc.OK = true
		d.disc.LastError = ""
		d.disc.LastSuccess = now
		d.disc.Unresolved = unresolved
	}
	d.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down: not a discovery problem.
	case err != nil && !failing:
		d.log.Error("discovery failed; keeping the last good topology and retrying",
			"err", err, "resources", len(last.Resources), "retry_every", d.o.DiscoveryInterval)
	case err == nil && failing:
		d.log.Info("discovery recovered", "resources", len(topo.Resources))
	}
	return topo, err == nil
}

// swapTopology installs topo in the engine and logs what changed.
func (d *Daemon) swapTopology(topo topology.Topology) {
	diff := diffTopology(d.topo, topo)
	d.o.Decider.SetTopology(topo)
	d.topo = topo
	d.slo.setTopology(topo)
	if diff.empty() {
		return
	}
	d.log.Info("topology changed", "resources", len(topo.Resources),
		"resources_added", diff.resAdded, "resources_removed", diff.resRemoved,
		"consumers_added", diff.conAdded, "consumers_removed", diff.conRemoved)
}

// diffStrings returns what is in cur but not old, and in old but not cur,
// each in the order of its slice.
func diffStrings(old, cur []string) (added, removed []string) {
	in := func(xs []string) map[string]bool {
		m := make(map[string]bool, len(xs))
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	inOld, inCur := in(old), in(cur)
	for _, s := range cur {
		if !inOld[s] {
			added = append(added, s)
		}
	}
	for _, s := range old {
		if !inCur[s] {
			removed = append(removed, s)
		}
	}
	return added, removed
}

type topoDiff struct {
	resAdded, resRemoved, conAdded, conRemoved []string
}

func (t topoDiff) empty() bool {
	return len(t.resAdded)+len(t.resRemoved)+len(t.conAdded)+len(t.conRemoved) == 0
}

func diffTopology(old, cur topology.Topology) topoDiff {
	keys := func(t topology.Topology) (res, con []string) {
		for _, r := range t.Resources {
			res = append(res, r.Name)
			for _, c := range r.Consumers {
				con = append(con, consumerKey(r.Name, c))
			}
		}
		return res, con
	}
	or, oc := keys(old)
	nr, nc := keys(cur)
	var d topoDiff
	d.resAdded, d.resRemoved = diffStrings(or, nr)
	d.conAdded, d.conRemoved = diffStrings(oc, nc)
	return d
}

func consumerKey(resource string, c topology.Consumer) string {
	return fmt.Sprintf("%s/%s@%s", c.Addr, c.Device, resource)
}

func topologyEqual(a, b topology.Topology) bool {
	return slices.EqualFunc(a.Resources, b.Resources, func(x, y topology.Resource) bool {
		return x.Name == y.Name && x.ThresholdMs == y.ThresholdMs && slices.Equal(x.Leaves, y.Leaves) &&
			slices.EqualFunc(x.Consumers, y.Consumers, consumerEqual)
	})
}

func consumerEqual(a, b topology.Consumer) bool {
	return a.Addr == b.Addr && a.Device == b.Device && a.Target == b.Target &&
		a.Backing == b.Backing && slices.Equal(a.IQNs, b.IQNs)
}
