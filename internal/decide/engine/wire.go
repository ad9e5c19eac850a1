package engine

import (
	"net/netip"

	"github.com/sanqos/sanqos/internal/observe/attribution"
)

// wireState holds the tick's per-client wire rates (issue 17): where
// clients share a device, the throttleable set is built from what each
// sends on the wire, not from the device's rate that all of them share.
type wireState struct {
	rates  map[netip.Addr]attribution.Rates
	shared map[string]bool
}

// SetWire gives the engine the per-client wire rates for the next Step;
// nil (or never calling it) keeps every consumer on its device's rates.
// The daemon calls it before each Step while wire counters run.
func (e *Engine) SetWire(rates map[netip.Addr]attribution.Rates) {
	e.wire.rates = rates
	if rates == nil {
		e.wire.shared = nil
		return
	}
	cs := make([]attribution.Consumer, len(e.cons))
	for i, c := range e.cons {
		cs[i] = attribution.Consumer{Addr: c.c.Addr, Device: c.c.Device}
	}
	e.wire.shared = attribution.Shared(cs)
}

// writeKBs is the write rate the policy judges consumer c by, and where
// it came from: its device's, or its wire rate where its device is
// shared (attribution.Choose); "" for the source without wire rates.
func (e *Engine) writeKBs(c *consumer, deviceKBs float64) (float64, string) {
	if e.wire.rates == nil {
		return deviceKBs, ""
	}
	r, src := attribution.Choose(attribution.Consumer{Addr: c.c.Addr, Device: c.c.Device}, e.wire.shared,
		attribution.Rates{WriteKBs: deviceKBs}, e.wire.rates)
	return r.WriteKBs, string(src)
}
