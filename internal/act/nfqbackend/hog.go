package nfqbackend

import "github.com/sanqos/sanqos/internal/act/packetpath"

// warnHog logs that a consumer lost its delay while holding most of the
// backlog, or that the backlog reached its hard limit. The delayer calls
// it on the packet thread, at most every hogWarnEvery; the write to the
// log happens on a goroutine of its own, because a slow log reader (a
// journald under load) must never stall the real-time packet thread.
func (b *Nfqueue) warnHog(c packetpath.ConsumerStats, backlog int, hard bool) {
	limit := packetpath.HardBacklogFactor * b.cfg.MaxBacklog
	go func() {
		if hard {
			b.log.Warn("the packet backlog is at its hard limit: packets of every consumer pass undelayed",
				"backlog", backlog, "limit", limit, "consumer", c.Addr, "consumer_held", c.Held, "consumer_bypassed", c.Bypassed)
			return
		}
		b.log.Warn("one consumer holds most of the packet backlog: its packets beyond its share pass undelayed",
			"consumer", c.Addr, "held", c.Held, "backlog", backlog, "bypassed", c.Bypassed, "delayed", c.Delayed)
	}()
}

// ConsumerStats returns the data-path counters of every consumer the
// packet path knows (see packetpath.Delayer.ConsumerStats).
func (b *Nfqueue) ConsumerStats() []packetpath.ConsumerStats {
	var s []packetpath.ConsumerStats
	b.onLoop(func() { s = b.del.ConsumerStats() })
	return s
}
