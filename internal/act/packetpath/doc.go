// Package packetpath is the user-space half of the nfqueue backend's
// packet path, the part that knows nothing of the kernel: it reads the
// flow of a queued TCP segment (ParseTCP) and holds it for its delay in a
// Delayer, which releases each flow's packets in order, shares the
// bounded backlog between consumers (consumers.go) and limits how fast a
// flow's delay rises (RiseLimit). The throttle package's Nfqueue backend
// feeds it the packets of its NFQUEUE socket on the real-time packet
// thread and gives the kernel the verdicts on the ids it releases.
package packetpath

import (
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
)

// Stats are the delayer's counters; the nfqueue backend adds those of
// its socket and packet thread to make the backend's (throttle.Stats,
// whose fields of the same names these are).
type Stats struct {
	PacketsHeld   uint64 // packets that were delayed
	PacketsPassed uint64 // packets released (accepted)
	Backlog       int    // packets held right now
	// DelayErrorP50 and DelayErrorMax measure how late packets leave:
	// actual hold minus the delay applied to them.
	DelayErrorP50 time.Duration
	DelayErrorMax time.Duration
	// Bypassed counts packets accepted at once because their consumer
	// was over its share of the backlog, or the backlog at its hard limit.
	Bypassed uint64
	// Bypassers are the consumers that had packets bypassed, the most
	// first (at most MaxBypassers), with their counters.
	Bypassers []ConsumerStats
	// PureAcks is "held" with AckDelay, "passed" without.
	PureAcks string
	// AcksPassed counts write-direction pure ACKs accepted at once
	// because AckDelay is off.
	AcksPassed uint64
}

// LimitRise returns the delay the rise limit lets the packet of flow f
// in direction dir, with acknowledgment number ack, that arrived at now
// asking for delay, have, and records it as Submit does. The edt
// backend's BPF classifier applies the same law in the kernel; its test
// compares the two packet by packet.
func (d *Delayer) LimitRise(f FlowKey, dir direction.Direction, ack uint32, delay time.Duration, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.limitRise(d.consumerOf(f.Dst, now), f, dir, ack, delay, now)
}
