package daemon

import (
	"log/slog"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// WireSource is what the loop needs of the per-client wire counters
// (*throttle.Wire): which clients to count, and their counters now.
type WireSource interface {
	SetClients([]netip.Addr) error
	Read() (map[netip.Addr]attribution.Counters, error)
}

// wireSampler feeds the engine per-client wire rates each tick (issue
// 17). A failing read gives no rates for that tick, so no client of a
// shared device counts as a writer (the fail-open side: nobody delayed
// on a guess), and is logged once until reads work again.
type wireSampler struct {
	src     WireSource
	meter   attribution.Meter
	last    map[netip.Addr]attribution.Rates    // the last tick's rates
	raw     map[netip.Addr]attribution.Counters // the last tick's counters (nil: the read failed)
	log     *slog.Logger
	failing bool
}

// WithWire makes an engine from FromEngine count each consumer's bytes on
// the wire with src and judge consumers of shared devices by them,
// starting with the consumers of topo; an empty topo leaves src's clients
// as they are until the loop sets the engine's topology (a reload: the
// running sampler shares src). Any other Decider, or a nil src, is
// returned as it is.
func WithWire(e Decider, src WireSource, topo topology.Topology, log *slog.Logger) Decider {
	a, ok := e.(*engineAdapter)
	if !ok || src == nil {
		return e
	}
	if log == nil {
		log = slog.Default()
	}
	a.wire = &wireSampler{src: src, log: log.With("part", "wire")}
	if len(topo.Resources) > 0 {
		a.wire.setTopology(topo)
	}
	return a
}

// setTopology counts the topology's consumers.
func (w *wireSampler) setTopology(t topology.Topology) {
	if w == nil {
		return
	}
	var addrs []netip.Addr
	for _, r := range t.Resources {
		for _, c := range r.Consumers {
			addrs = append(addrs, c.Addr)
		}
	}
	if err := w.src.SetClients(addrs); err != nil {
		w.log.Warn("wire counters do not follow the consumers; their write rates come from their devices", "err", err)
	}
}

// sample returns the rates since the last tick (nil only without a
// sampler: device rates).
func (w *wireSampler) sample(now time.Time) map[netip.Addr]attribution.Rates {
	if w == nil {
		return nil
	}
	c, err := w.src.Read()
	if err != nil {
		if !w.failing {
			w.log.Warn("reading wire counters failed; clients of shared devices count as not writing until it works", "err", err)
		}
		w.failing = true
		w.last = map[netip.Addr]attribution.Rates{}
		w.raw = nil
		return w.last
	}
	if w.failing {
		w.log.Info("wire counters read again")
		w.failing = false
	}
	w.last = w.meter.Update(now, c)
	w.raw = c
	return w.last
}

// show makes the status of each consumer judged by its wire rates show
// them: its device's rates are every client's of that device.
func (w *wireSampler) show(cs []status.Consumer, addrs []netip.Addr) {
	if w == nil {
		return
	}
	for i := range cs {
		if r, ok := w.last[addrs[i]]; ok && cs[i].WriteFrom == string(attribution.Wire) {
			cs[i].ReadKBs, cs[i].WriteKBs = r.ReadKBs, r.WriteKBs
		}
	}
}
