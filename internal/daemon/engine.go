package daemon

import (
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// FromEngine adapts the production engine to the daemon: its decisions are
// turned into the status shape (strings, ms) and the throttle state for
// the given target ports (throttle.DefaultPorts when empty). probe, when
// not nil, must be the engine's Fine source: it is sampled before each
// Step and follows the topology's devices.
func FromEngine(e *engine.Engine, ports []uint16, probe *Probe) Decider {
	return &engineAdapter{e: e, ports: ports, probe: probe, names: map[netip.Addr]string{}}
}

type engineAdapter struct {
	e     *engine.Engine
	ports []uint16
	probe *Probe
	// names caches the text of each consumer address: formatting them
	// anew was most of the adapter's allocations per tick.
	names map[netip.Addr]string
	wire  *wireSampler // nil: device rates only (see WithWire)
}

func (a *engineAdapter) SetTopology(t topology.Topology) {
	clear(a.names) // forget addresses that left
	a.probe.SetTopology(t)
	a.e.SetTopology(t)
	a.wire.setTopology(t)
}

// Adopt makes a's engine take over the state of old's (engine.Adopt) when
// old is FromEngine's too, and its wire meter go on from old's counters
// (without them its first tick would have no wire rates).
func (a *engineAdapter) Adopt(old Decider) {
	o, ok := old.(*engineAdapter)
	if !ok || o == a {
		return
	}
	a.e.Adopt(o.e)
	if a.wire != nil && o.wire != nil && a.wire.src == o.wire.src {
		a.wire.meter, a.wire.last, a.wire.failing = o.wire.meter, o.wire.last, o.wire.failing
	}
}

func (a *engineAdapter) name(ip netip.Addr) string {
	s, ok := a.names[ip]
	if !ok {
		s = ip.String()
		a.names[ip] = s
	}
	return s
}

func (a *engineAdapter) addrNames(as []netip.Addr) []string {
	if len(as) == 0 {
		return nil
	}
	s := make([]string, len(as))
	for i, ip := range as {
		s[i] = a.name(ip)
	}
	return s
}

// inFlightSampler is an engine.InFlight that answers from a sample taken
// before the Step (diskstats.InFlightSnapshot), as the probe does.
type inFlightSampler interface {
	Sample(snap []diskstats.Stat)
}

func (a *engineAdapter) Step(now time.Time, snap []diskstats.Stat) Decision {
	a.probe.Sample(now)
	if s, ok := a.e.Config().InFlight.(inFlightSampler); ok {
		s.Sample(snap)
	}
	a.e.SetWire(a.wire.sample(now))
	d := a.e.Step(now, snap)
	out := Decision{
		Resources: make([]status.Resource, len(d.Resources)),
		Consumers: make([]status.Consumer, len(d.Consumers)),
		State:     withReadCaps(throttleState(d.Throttles(), a.ports), d.Consumers, a.ports),
	}
	for i, r := range d.Resources {
		out.Resources[i] = status.Resource{
			Name: r.Name, SignalMs: r.SignalMs, RawMs: r.RawMs, ThresholdMs: r.ThresholdMs, ThresholdBy: r.ThresholdBy, Conflict: r.Conflict, TargetMs: r.TargetMs,
			DelayMs: r.DelayMs, ControlMs: r.ControlMs, UMaxMs: r.UMaxMs, UMaxLimitMs: r.UMaxLimitMs, Saturated: r.Saturated,
			Futile: r.Futile, Probing: r.Probing, GainMsPerMs: r.GainMsPerMs, RelapseMs: r.RelapseMs, RecallMs: r.RecallMs,
			Held: r.Held, PendingMs: r.PendingMs, Reads: r.Reads, Direction: r.Direction.String(), Members: a.addrNames(r.Members),
			Returning: a.addrNames(r.Returning),
			Signal:    r.Signal, Source: r.Source, MeanMs: r.MeanMs, P95Ms: r.P95Ms, P99Ms: r.P99Ms,
			MissingDevices: r.MissingDevices,
		}
	}
	for i, c := range d.Consumers {
		out.Consumers[i] = status.Consumer{
			Resource: c.Resource, Device: c.Device, Addr: a.name(c.Addr), ReadKBs: c.ReadKBs,
			WriteKBs: c.WriteKBs, WriteEWMAKBs: c.WriteEWMAKBs, RAwaitMs: c.RAwaitMs, Throttleable: c.Throttleable,
			WriteFrom: c.WriteFrom, OutstandingWrites: c.OutstandingWrites, DelayMs: c.HeldMs,
			Name: c.Name, Terms: c.Terms,
		}
	}
	if a.wire != nil {
		addrs := make([]netip.Addr, len(d.Consumers))
		for i, c := range d.Consumers {
			addrs[i] = c.Addr
		}
		a.wire.show(out.Consumers, addrs)
	}
	return out
}

// throttleState translates what the engine asks (per resource: members,
// direction, delay) into the throttle backend's state: one group per
// resource on the given ports. A throttle with no members and no delay
// becomes an empty group, so the backend removes what it had installed.
func throttleState(ts []engine.Throttle, ports []uint16) throttle.State {
	s := throttle.State{Groups: make([]throttle.Group, len(ts))}
	for i, t := range ts {
		g := throttle.Group{Name: t.Name, Ports: ports}
		if t.Delay > 0 && len(t.Members) > 0 {
			g.Members = t.Members
			if t.Direction&direction.Write != 0 {
				g.WriteDelay = t.Delay
			}
			if t.Direction&direction.Read != 0 {
				g.ReadDelay = t.Delay
			}
		}
		if t.Direction&direction.Write != 0 && t.ArmedDelay > 0 {
			g.Armed, g.ArmedDelay = t.Armed, t.ArmedDelay
		}
		s.Groups[i] = g
		for _, o := range t.Own {
			s.Groups = append(s.Groups, ownGroup(t, o, ports))
		}
	}
	return s
}

// ownGroup is the backend group of a consumer the engine holds at its
// own delay (tenant shares, reservations, caps): a group of one, named
// after its resource and address so it stays the same group, and its
// kernel objects the same, from tick to tick while the consumer is held
// apart.
func ownGroup(t engine.Throttle, o engine.OwnDelay, ports []uint16) throttle.Group {
	g := throttle.Group{Name: t.Name + "@" + o.Addr.String(), Ports: ports}
	if o.Delay > 0 {
		g.Members = []netip.Addr{o.Addr}
		if t.Direction&direction.Write != 0 {
			g.WriteDelay = o.Delay
		}
		if t.Direction&direction.Read != 0 {
			g.ReadDelay = o.Delay
		}
	}
	return g
}

// withReadCaps adds a group per consumer whose tenant terms cap its reads
// (read_cap, with rate_dev): the rate backend's HTB class for it, beside
// whatever delay it is held at. A consumer on several resources is capped
// once, at the lowest of its caps. A manual throttle of the same address
// replaces it (mergeOverrides).
func withReadCaps(s throttle.State, cons []engine.ConsumerRates, ports []uint16) throttle.State {
	caps := map[netip.Addr]uint64{}
	for _, c := range cons {
		r := uint64(c.Terms.ReadCapBps)
		if r == 0 {
			continue
		}
		if old, ok := caps[c.Addr]; !ok || r < old {
			caps[c.Addr] = r
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(caps), netip.Addr.Compare) {
		s.Groups = append(s.Groups, throttle.Group{Name: ReadCapGroup(a), Members: []netip.Addr{a}, Ports: ports, ReadRate: caps[a]})
	}
	return s
}

// ReadCapGroup names the group of a consumer's tenant read cap.
func ReadCapGroup(a netip.Addr) string { return "readcap-" + a.String() }
