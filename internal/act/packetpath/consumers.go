package packetpath

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Isolation of consumers in the backlog.
//
// The packets held in user space are bounded, and a consumer (a
// destination address) must not be able to use that bound up for
// everyone: one throttled client with thousands of connections at a long
// delay holds tens of thousands of packets, and when the bound was one
// budget for all, its overflow let every consumer's packets pass
// undelayed. So the backlog has a budget, shares of it and a hard limit:
//
//   - the shared budget, maxBacklog (NfqueueConfig.MaxBacklog,
//     DefaultMaxBacklog): while fewer packets are held, every packet is
//     held, whoever it is for. A lone consumer can use all of it.
//   - past the budget, each consumer may hold its share: maxBacklog / n
//     packets, n being the consumers holding packets (itself included),
//     and at least minShare (but never more than maxBacklog). A consumer
//     at or over its share loses the delay of its own new packets only:
//     they pass at once, after the packets of their flow still held (a
//     packet never overtakes an earlier one of its flow), and the flow's
//     ramp restarts from 0. The packets of consumers under their share
//     are still held. Once under the budget again, every packet is held
//     again: the budget is never left unused.
//   - the hard limit, HardBacklogFactor × maxBacklog: past it every
//     packet passes at once, as above (fail open: memory stays bounded
//     whatever the consumers do). Since only consumers under their share
//     still add packets past the budget, the hard limit is reached only
//     when very many consumers each hold a few.
//
// A consumer's packets that passed this way are counted as its bypassed
// packets (Stats.Bypassers, ConsumerStats), and the backend logs a
// warning, at most every hogWarnEvery, when the consumer that loses its
// delay holds most of the backlog.
const (
	// HardBacklogFactor × maxBacklog is the hard limit. Twice the
	// budget leaves the other consumers as much room as the one that
	// filled it; the kernel's queue (kernelQueueLen) must stay above it.
	HardBacklogFactor = 2
	// minShare is the least share of a consumer: with thousands of
	// consumers holding packets, each may still hold a few. The hard
	// limit bounds the total.
	minShare = 16
	// hogWarnEvery spaces the warnings about a consumer holding most of
	// the backlog: they come from the real-time packet thread.
	hogWarnEvery = 10 * time.Second
)

// consumer is what the delayer keeps of one destination address.
type consumer struct {
	seen time.Time // arrival of its last packet
	// epoch marks its flows' remembered ramps and acknowledgment
	// numbers: an entry of another epoch is forgotten. Forget gives a
	// consumer a new one instead of walking the per-flow tables.
	epoch    uint64
	held     int    // packets held now (or being released)
	delayed  uint64 // packets it had held
	bypassed uint64 // packets that passed at once because of a limit
}

// ConsumerStats are one consumer's data-path counters.
type ConsumerStats struct {
	Addr netip.Addr
	// Held is how many of its packets are held right now.
	Held int
	// Delayed counts its packets that were held; Bypassed those that
	// passed at once because it was over its share of the backlog, or
	// the backlog was at its hard limit.
	Delayed  uint64
	Bypassed uint64
}

// MaxBypassers is how many consumers Stats.Bypassers names at most.
const MaxBypassers = 16

// consumerOf returns dst's record, made anew when there is none, and
// records an arrival at now. The table is bounded by MaxFlows like the
// per-flow ones: a new destination at the cap takes the place of an
// idle one. d.mu held.
func (d *Delayer) consumerOf(dst netip.Addr, now time.Time) *consumer {
	c := d.cons[dst]
	if c == nil {
		if len(d.cons) >= MaxFlows {
			d.evictIdleConsumer()
		}
		d.epochs++
		c = &consumer{epoch: d.epochs}
		d.cons[dst] = c
	}
	c.seen = now
	return c
}

// evictIdleConsumer removes a consumer that holds nothing, if a few
// looks find one: a record with held packets must stay until they are
// out, and there are at most hardBacklog of those. d.mu held.
func (d *Delayer) evictIdleConsumer() {
	n := 0
	for a, c := range d.cons {
		if c.held == 0 {
			d.dropConsumer(a)
			return
		}
		if n++; n >= 8 {
			return
		}
	}
}

// dropConsumer forgets a consumer that holds nothing: its arrival time,
// its counters and (by its epoch) its flows' ramps. d.mu held.
func (d *Delayer) dropConsumer(a netip.Addr) {
	delete(d.cons, a)
	delete(d.bypassers, a)
}

// current reports whether a per-flow entry of dst made in epoch is still
// to be remembered. d.mu held.
func (d *Delayer) current(dst netip.Addr, epoch uint64) bool {
	c := d.cons[dst]
	return c != nil && c.epoch == epoch
}

// admit reports whether c may hold one more packet; hard tells a refusal
// at the hard limit from one over c's share. d.mu held.
func (d *Delayer) admit(c *consumer) (ok, hard bool) {
	total := d.backlog()
	switch {
	case total >= HardBacklogFactor*d.maxBacklog:
		return false, true
	case total < d.maxBacklog:
		return true, false
	}
	n := d.holding
	if c.held == 0 {
		n++
	}
	return c.held < min(max(d.maxBacklog/n, minShare), d.maxBacklog), false
}

// hold counts a packet of c as held. d.mu held.
func (d *Delayer) hold(c *consumer) {
	if c.held == 0 {
		d.holding++
	}
	c.held++
	c.delayed++
}

// unhold counts n packets of dst as released. d.mu held.
func (d *Delayer) unhold(dst netip.Addr, n int) {
	c := d.cons[dst]
	if c == nil || n == 0 {
		return
	}
	c.held -= n
	if c.held <= 0 {
		c.held = 0
		d.holding--
	}
}

// bypassed counts a packet of c at dst that passed at once because of a
// limit, and returns the warning to log when c holds most of the backlog
// (nil: none due). d.mu held.
func (d *Delayer) bypassed(dst netip.Addr, c *consumer, hard bool, now time.Time) *hogWarning {
	d.bypass++
	c.bypassed++
	d.bypassers[dst] = c
	total := d.backlog()
	if c.held*2 <= total && !hard || now.Sub(d.warned) < hogWarnEvery && !d.warned.IsZero() {
		return nil
	}
	d.warned = now
	return &hogWarning{ConsumerStats{Addr: dst, Held: c.held, Delayed: c.delayed, Bypassed: c.bypassed}, total, hard}
}

// hogWarning is what the delayer's Warn hook gets.
type hogWarning struct {
	ConsumerStats
	backlog int
	hard    bool
}

// Forget drops the arrival times and remembered delays of destinations
// not in keep. A destination that left the queue's set may go on sending
// unseen and undelayed, its SRTT falling: when it comes back its ramp
// must start again from 0.
//
// It walks the consumers, not the per-flow tables (which hold up to
// MaxFlows entries each): a consumer forgotten, or given a new epoch
// while it still holds packets, has its flows' entries ignored from now
// on, and the sweep removes them a few per packet.
func (d *Delayer) Forget(keep func(netip.Addr) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for a, c := range d.cons {
		if keep(a) {
			continue
		}
		if c.held > 0 {
			d.epochs++
			c.epoch = d.epochs
			continue
		}
		d.dropConsumer(a)
	}
}

// ConsumerStats returns the counters of every consumer the delayer
// knows, by address.
func (d *Delayer) ConsumerStats() []ConsumerStats {
	d.mu.Lock()
	out := make([]ConsumerStats, 0, len(d.cons))
	for a, c := range d.cons {
		out = append(out, ConsumerStats{Addr: a, Held: c.held, Delayed: c.delayed, Bypassed: c.bypassed})
	}
	d.mu.Unlock()
	slices.SortFunc(out, func(a, b ConsumerStats) int { return a.Addr.Compare(b.Addr) })
	return out
}

// topBypassers copies the consumers with bypassed packets, the most
// bypassed first, at most MaxBypassers. d.mu held: the walk is over the
// consumers that ever lost their delay, usually none.
func (d *Delayer) topBypassers() []ConsumerStats {
	if len(d.bypassers) == 0 {
		return nil
	}
	out := make([]ConsumerStats, 0, len(d.bypassers))
	for a, c := range d.bypassers {
		out = append(out, ConsumerStats{Addr: a, Held: c.held, Delayed: c.delayed, Bypassed: c.bypassed})
	}
	return out
}

// SortBypassers orders consumers that had packets bypassed, the most
// bypassed first (by address on a tie), and keeps the first
// MaxBypassers: what topBypassers copied, outside the lock, and the edt
// backend's per-initiator counts.
func SortBypassers(out []ConsumerStats) []ConsumerStats {
	slices.SortFunc(out, func(a, b ConsumerStats) int {
		if c := cmp.Compare(b.Bypassed, a.Bypassed); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
	return out[:min(len(out), MaxBypassers)]
}
