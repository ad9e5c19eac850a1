package engine

import (
	"net/netip"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/policy"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// SetTopology replaces the topology. Resources (by name), consumers (by
// resource, address and device) and devices (by name) that persist keep
// their state: EWMAs, controller history, set membership, last counters.
// New ones start at rest; a new device is measured from its second
// snapshot on.
func (e *Engine) SetTopology(topo topology.Topology) {
	oldDevs := make(map[string]int, len(e.devs))
	for i, d := range e.devs {
		oldDevs[d.name] = i
	}
	type consKey struct {
		res, dev string
		addr     netip.Addr
	}
	oldCons := make(map[consKey]int, len(e.cons))
	for _, r := range e.res {
		for _, ci := range r.consumers {
			c := e.cons[ci].c
			oldCons[consKey{r.name, c.Device, c.Addr}] = ci
		}
	}
	oldRes := make(map[string]int, len(e.res))
	for i, r := range e.res {
		oldRes[r.name] = i
	}
	usedRes := make(map[int]bool)

	devIdx := make(map[string]int)
	var devs []device
	devOf := func(name string) int {
		if name == "" {
			return -1
		}
		if i, ok := devIdx[name]; ok {
			return i
		}
		d := device{name: name}
		if oi, ok := oldDevs[name]; ok {
			d = e.devs[oi]
		}
		devIdx[name] = len(devs)
		devs = append(devs, d)
		return len(devs) - 1
	}
	var cons []consumer
	res := make([]resource, 0, len(topo.Resources))
	for _, tr := range topo.Resources {
		var old *resource
		if oi, ok := oldRes[tr.Name]; ok && !usedRes[oi] {
			usedRes[oi] = true
			old = &e.res[oi]
		}
		r := e.resourceFor(tr, old)
		seenDev := make(map[int]bool)
		seenSig := make(map[int]bool)
		for _, tc := range tr.Consumers {
			c := consumer{c: tc, dev: devOf(tc.Device)}
			if oi, ok := oldCons[consKey{tr.Name, tc.Device, tc.Addr}]; ok {
				c.st, c.lastWrite, c.heldMs, c.ten = e.cons[oi].st, e.cons[oi].lastWrite, e.cons[oi].heldMs, e.cons[oi].ten
				delete(oldCons, consKey{tr.Name, tc.Device, tc.Addr})
			}
			r.consumers = append(r.consumers, len(cons))
			cons = append(cons, c)
			if c.dev < 0 {
				continue
			}
			if !seenDev[c.dev] {
				seenDev[c.dev] = true
				r.devs = append(r.devs, c.dev)
			}
			if e.pol.Counts(tc) && !seenSig[c.dev] {
				seenSig[c.dev] = true
				r.sigDevs = append(r.sigDevs, c.dev)
			}
		}
		res = append(res, r)
	}
	markSignalDevices(devs, res)
	e.devIdx, e.devs, e.cons, e.res = devIdx, devs, cons, res
	clear(e.hintName) // device indices changed
}

// resourceFor is the state of topology resource tr at the start of its
// life, or carried over from old (nil: new) as a reload carries it (see
// "Reloads"): a new threshold moves the controller's set point, it does
// not restart it.
func (e *Engine) resourceFor(tr topology.Resource, old *resource) resource {
	r := resource{name: tr.Name, threshold: e.cfg.ThresholdMs, signal: e.cfg.Signal}
	if tr.ThresholdMs > 0 {
		r.threshold = tr.ThresholdMs
	}
	if tr.Signal != "" {
		r.signal = tr.Signal
	}
	if r.signal == "" {
		r.signal = SignalMean
	}
	// The configuration and the threshold were validated in New and
	// ValidateTopology, the only errors NewLoop has.
	r.loop, _ = control.NewLoop(e.loopConfig(r.threshold))
	if old != nil {
		r.started = old.started
		r.ten = old.ten
		r.loop.Adopt(old.loop)
	}
	return r
}

// markSignalDevices flags the devices whose reads are some resource's
// signal.
func markSignalDevices(devs []device, res []resource) {
	for i := range devs {
		devs[i].sig = false
	}
	for _, r := range res {
		for _, di := range r.sigDevs {
			devs[di].sig = true
		}
	}
}

// loopConfig is the configuration of a resource's loop.
func (e *Engine) loopConfig(threshold float64) control.LoopConfig {
	return control.LoopConfig{
		Law: e.cfg.Controller, Params: e.cfg.Control, ThresholdMs: threshold,
		Alpha: e.cfg.Alpha, Headroom: e.cfg.Headroom, UMaxLimitMs: e.cfg.UMaxLimitMs, IdleHold: e.idleHold,
		ByWrites: e.cfg.Policy == policy.ReadOverWrite, Off: e.cfg.RulesOff,
	}
}

// DefaultHeadroom and DefaultUMaxLimitMs are the law's (package control,
// where their reasons are).
const (
	DefaultHeadroom    = control.DefaultHeadroom
	DefaultUMaxLimitMs = control.DefaultUMaxLimitMs
)
