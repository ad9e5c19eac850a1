package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/metrics"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// sloTotals adds up, at every tick, what an SLO is computed from
// (metrics.SLO): the gauges of the status snapshot are one tick's, and a
// scrape every 15 s would see one tick in 150. Everything comes from what
// the tick has already read (the diskstats snapshot, the probe's and the
// wire counters' samples, the step's decision): no kernel read of its
// own, a few map look-ups per device and resource per tick. Owned by the
// tick loop except for mu, which a scrape takes to copy the totals.
type sloTotals struct {
	mu  sync.Mutex
	res map[string]*metrics.SLOResource // by resource name
	cl  map[netip.Addr]*metrics.Client
	// manual are the manual throttle groups of the last tick (the
	// Overrides' own slice, not changed after).
	manual []throttle.Group

	// The tick loop's own.
	devs     map[string][]string // resource → its consumers' devices (set by setTopology)
	names    map[netip.Addr]string
	prevDisk map[string]diskCounters // by device: the last tick's counters
	prevWire map[netip.Addr]attribution.Counters
	stats    map[string]int // scratch: device → index in the tick's snapshot
}

type diskCounters struct{ reads, ticksMs uint64 }

func newSLOTotals() *sloTotals {
	return &sloTotals{
		res: map[string]*metrics.SLOResource{}, cl: map[netip.Addr]*metrics.Client{},
		devs: map[string][]string{}, names: map[netip.Addr]string{},
		prevDisk: map[string]diskCounters{}, prevWire: map[netip.Addr]attribution.Counters{},
		stats: map[string]int{},
	}
}

// probeTicker is a Decider that can give the block-layer probe's reads
// of the tick per device (FromEngine's, when the probe runs).
type probeTicker interface {
	probeTick(device string) (latency.Ops, bool)
}

// wireReader is a Decider whose wire counters (FromEngine's WithWire)
// were read this tick: their values as the kernel has them.
type wireReader interface {
	wireCounters() map[netip.Addr]attribution.Counters
}

func (a *engineAdapter) probeTick(device string) (latency.Ops, bool) {
	ops, _, _, ok := a.probe.TickReads(device)
	return ops, ok
}

func (a *engineAdapter) wireCounters() map[netip.Addr]attribution.Counters {
	if a.wire == nil {
		return nil
	}
	return a.wire.raw
}

// setTopology makes the totals follow t: a resource or client that left
// it leaves /metrics (its totals start from zero if it comes back, which
// rate() takes as a counter reset).
func (s *sloTotals) setTopology(t topology.Topology) {
	clear(s.devs)
	clear(s.names)
	iqns := map[netip.Addr][]string{}
	for _, r := range t.Resources {
		var devs []string
		for _, c := range r.Consumers {
			if c.Device != "" && !slices.Contains(devs, c.Device) {
				devs = append(devs, c.Device)
			}
			for _, q := range c.IQNs {
				if !slices.Contains(iqns[c.Addr], q) {
					iqns[c.Addr] = append(iqns[c.Addr], q)
				}
			}
			if _, ok := iqns[c.Addr]; !ok {
				iqns[c.Addr] = nil
			}
		}
		s.devs[r.Name] = devs
	}
	for a, qs := range iqns {
		slices.Sort(qs)
		s.names[a] = strings.Join(qs, ",")
	}
	for dev := range s.prevDisk {
		if !slices.ContainsFunc(t.Resources, func(r topology.Resource) bool { return slices.Contains(s.devs[r.Name], dev) }) {
			delete(s.prevDisk, dev)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.res {
		if _, ok := s.devs[name]; !ok {
			delete(s.res, name)
		}
	}
	for a, c := range s.cl {
		if n, ok := s.names[a]; !ok {
			delete(s.cl, a)
			delete(s.prevWire, a)
		} else {
			c.Name = n
		}
	}
}

// observe adds one tick of length period: the diskstats snapshot snap,
// the step's resources rs (with InForceMs set), whatever dec (the
// Decider) sampled of the probe and the wire, and the manual throttle
// groups merged into the tick's state (kept for the scrape).
func (s *sloTotals) observe(period time.Duration, snap []diskstats.Stat, rs []status.Resource, dec Decider, manual []throttle.Group) {
	clear(s.stats)
	for i := range snap {
		s.stats[snap[i].Device] = i
	}
	probe, _ := dec.(probeTicker)
	var wire map[netip.Addr]attribution.Counters
	if w, ok := dec.(wireReader); ok {
		wire = w.wireCounters()
	}
	sec := period.Seconds()

	s.mu.Lock()
	defer s.mu.Unlock()
	s.manual = manual
	for i := range rs {
		r := &rs[i]
		t := s.res[r.Name]
		if t == nil {
			t = &metrics.SLOResource{Name: r.Name, Buckets: make([]uint64, len(metrics.ReadBuckets))}
			s.res[r.Name] = t
		}
		for _, dev := range s.devs[r.Name] {
			if j, ok := s.stats[dev]; ok {
				t.Reads, t.ReadSeconds = s.diskDelta(dev, snap[j], t.Reads, t.ReadSeconds)
			}
			if r.Source != "ebpf" || probe == nil {
				continue
			}
			if ops, ok := probe.probeTick(dev); ok {
				t.Timed += ops.Count
				t.TimedSeconds += ops.Sum.Seconds()
				addBuckets(t.Buckets, &ops.Hist)
			}
		}
		if r.ThresholdMs > 0 && r.SignalMs > r.ThresholdMs {
			t.OverThresholdSeconds += sec
		}
		if r.InForceMs > 0 {
			t.ThrottledSeconds += sec
		}
		if r.Saturated {
			t.SaturatedSeconds += sec
		}
	}
	for a, c := range wire {
		name, ok := s.names[a]
		if !ok {
			continue // not a consumer of the topology (any more)
		}
		k := s.cl[a]
		if k == nil {
			k = &metrics.Client{Addr: a.String(), Name: name}
			s.cl[a] = k
		}
		// A client seen for the first time, or whose counters went back
		// (its set entry was re-created), counts from the entry's
		// creation: the bytes since then are all this daemon's.
		p, seen := s.prevWire[a]
		if !seen || c.Sent < p.Sent || c.Received < p.Received {
			p = attribution.Counters{}
		}
		k.SentBytes += c.Sent - p.Sent
		k.ReceivedBytes += c.Received - p.Received
		s.prevWire[a] = c
	}
}

// diskDelta adds dev's reads and read time since the last tick to reads
// and secs. A device seen for the first time adds nothing (its counters
// are since boot); one whose counters went back (re-created) adds them
// from zero.
func (s *sloTotals) diskDelta(dev string, st diskstats.Stat, reads uint64, secs float64) (uint64, float64) {
	cur := diskCounters{reads: st.ReadIOs, ticksMs: st.ReadTicks}
	p, seen := s.prevDisk[dev]
	s.prevDisk[dev] = cur
	if !seen {
		return reads, secs
	}
	if cur.reads < p.reads || cur.ticksMs < p.ticksMs {
		p = diskCounters{}
	}
	return reads + (cur.reads - p.reads), secs + float64(cur.ticksMs-p.ticksMs)/1e3
}

// bucketOf maps each probe bucket to the first of metrics.ReadBuckets at
// or above its top (len(ReadBuckets): above them all), so a read is
// never counted faster than it was.
var bucketOf = func() [latency.NumBuckets]int {
	var m [latency.NumBuckets]int
	for i := range m {
		_, hi := latency.BucketBounds(i)
		m[i] = len(metrics.ReadBuckets)
		for j, le := range metrics.ReadBuckets {
			if hi.Seconds() <= le+1e-12 {
				m[i] = j
				break
			}
		}
	}
	return m
}()

func addBuckets(b []uint64, h *latency.Histogram) {
	for i, c := range h {
		if c == 0 {
			continue
		}
		if j := bucketOf[i]; j < len(b) {
			b[j] += c
		}
	}
}

// snapshot copies the totals for a scrape.
func (s *sloTotals) snapshot() metrics.SLO {
	s.mu.Lock()
	groups := s.manual
	out := metrics.SLO{Resources: make([]metrics.SLOResource, 0, len(s.res)), Clients: make([]metrics.Client, 0, len(s.cl))}
	for _, r := range s.res {
		c := *r
		c.Buckets = slices.Clone(r.Buckets)
		out.Resources = append(out.Resources, c)
	}
	for _, c := range s.cl {
		out.Clients = append(out.Clients, *c)
	}
	s.mu.Unlock()
	for _, g := range groups {
		for _, m := range g.Members {
			t := metrics.Manual{Addr: m.String(), ReadRate: g.ReadRate}
			switch {
			case g.ReadRate > 0:
			case g.WriteDelay > 0 && g.ReadDelay > 0:
				t.Direction, t.Delay = "both", g.WriteDelay
			case g.ReadDelay > 0:
				t.Direction, t.Delay = "read", g.ReadDelay
			default:
				t.Direction, t.Delay = "write", g.WriteDelay
			}
			out.Manual = append(out.Manual, t)
		}
	}
	return out
}
