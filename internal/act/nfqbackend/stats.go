package nfqbackend

import (
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
)

func (b *Nfqueue) Stats() plan.Stats {
	var s plan.Stats
	b.onLoop(func() {
		s = delayerStats(b.del.Stats())
		s.Errors = b.errs.Load() + b.sock.sockErrors()
		s.YieldMax, s.WakeLateMax = b.stalls.yields.max(), b.stalls.wakes.max()
		s.Takeovers, s.TakeoverMax = uint64(b.stalls.takeovers.n), b.stalls.takeovers.max()
		s.TakeoversDeclined = b.declined.Load()
	})
	return s
}

// RiseStats returns how much the rise limit held delays below the
// requested ones.
func (b *Nfqueue) RiseStats() packetpath.RiseStats {
	var s packetpath.RiseStats
	b.onLoop(func() { s = b.del.RiseStats() })
	return s
}

// delayerStats are the backend's Stats with the delayer's counters in
// them; the nfqueue backend adds its socket's and packet thread's.
func delayerStats(d packetpath.Stats) plan.Stats {
	return plan.Stats{
		PacketsHeld: d.PacketsHeld, PacketsPassed: d.PacketsPassed, Backlog: d.Backlog,
		DelayErrorP50: d.DelayErrorP50, DelayErrorMax: d.DelayErrorMax,
		Bypassed: d.Bypassed, Bypassers: d.Bypassers, PureAcks: d.PureAcks, AcksPassed: d.AcksPassed,
	}
}
