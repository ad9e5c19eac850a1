package packetpath

import (
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
)

// RiseLimit bounds how fast the delay applied to one flow may rise, so
// that the flow's sender never sends a TCP tail loss probe because of us.
//
// Why. Linux arms a loss probe (RACK-TLP, tcp_schedule_loss_probe) at
// PTO = 2·SRTT + 2 ms after the last send or ACK whenever more than one
// segment is in flight, and SRTT follows the RTT samples slowly: srtt ←
// 7/8·srtt + 1/8·sample per ACK. When the delay of a flow's ACKs jumps
// (2 → 12 ms from one controller tick to the next, or 0 → 5 ms when
// throttling engages on a link whose SRTT is 0.05 ms), the next ACK
// arrives after the PTO and the sender resends its tail: a spurious
// retransmission (the receiver reports it with a DSACK). The lab counted
// 60–90 of them per writer per 4-minute run before this limit.
//
// The law. The delay applied to a flow's next packet is
//
//	applied = min(requested, max(prev·(1+Factor), prev+Step))
//
// where prev is the delay applied to the flow's previous packet of the
// same direction (0 for a new flow). Lowering is applied at once: a lower
// RTT sample never brings an ACK past the PTO.
//
// The delay rises only with packets that give the sender an RTT sample:
// SRTT moves once per sample, not per packet. In the write direction a
// sample is an ACK that acknowledges new data (with AckDelay off the pure
// ACKs pass undelayed and are not counted: the held small segments then
// ramp on their own acknowledgment numbers, see SubmitPureAck); the target's other
// packets (a SCSI Response after the ACK of its data, window updates,
// duplicate ACKs) keep the previous delay at most. Counting those as
// steps made the ramp twice as steep as the sender could follow, and the
// live test still saw loss probes. In the read direction the samples are
// the initiator's ACKs of our data segments, which we do not see; Linux
// acknowledges at least every second segment, so the ramp takes a step
// every second data packet.
//
// Why these values (checked by TestRiseLimitKeepsPTOAboveDelay, which
// runs the srtt recurrence over step changes). Assume, pessimistically,
// that every packet is an RTT sample and the base RTT is 0.
//   - Multiplicative phase: for samples growing by (1+g) per ACK, srtt
//     after a sample tends to r·sample, r = (1/8)/(1 − (7/8)/(1+g)). The
//     probe a packet races was armed with the srtt before its own sample,
//     r·sample/(1+g), so the PTO stays above the sample while
//     2r/(1+g) = 1/(4g + 1/2) > 1: g < 1/8 (the 2 ms helps only at small
//     delays). g = 0.1 gives 1.11: the PTO is 1.11·sample plus 2 ms.
//     (Comparing with the srtt after the sample, as one might, gives the
//     wrong bound 1/6; the simulation finds 0.125.)
//   - Additive phase (small delays, where prev·g < Step): a ramp of c per
//     sample makes srtt lag by at most 7c, while the PTO has 2·srtt: the
//     simulation's closest approach with c = 0.25 ms is 1.55 ms under the
//     PTO, and steps up to 0.88 ms stay under it with g = 0.1.
//
// Cost: from 0 to 10 ms the ramp takes about 25 RTT samples (10
// additive steps to 2.5 ms, then 15 of 10 %): the ACKs of one 64 KiB
// write where the target acknowledges every second segment, a few writes
// where receive offload merges segments. That is tens of milliseconds at
// most, inside one 100 ms controller tick: the controller sees its delay
// take effect a little later, never a different one.
//
// Jiffies, and what is left. The probe timer runs in jiffies: with
// HZ=250 it may fire up to one 4 ms tick before the PTO, and a flow whose
// SRTT is near 0 (unthrottled on a fast link) has a one-tick timer that
// fires anywhere from 0 to 4 ms after it was armed. Such a flow sends
// probes by itself, with nothing of ours on its path, and no ramp from 0
// avoids that tick entirely; a gentler ramp (g = 0.05, c = 0.1 ms)
// measured no better. Measured by TestLiveJitteryDelayNoLossProbes (a new
// delay every 100 ms, 0–20 ms, for 10 s; sync 64 KiB writes and a 40 MB/s
// upload): 0–1 loss probes in throttled steps with this limit, 41–58
// without it, side by side.
type RiseLimit struct {
	Factor float64       // g: relative rise per packet
	Step   time.Duration // c: absolute rise per packet, for small delays
}

// DefaultRiseLimit is the limit the nfqueue backend uses; see RiseLimit
// for why these values.
var DefaultRiseLimit = RiseLimit{Factor: 0.1, Step: 250 * time.Microsecond}

// Next returns the delay to apply to a packet whose flow had prev and
// which is asked to get target. The zero RiseLimit does not limit.
func (r RiseLimit) Next(prev, target time.Duration) time.Duration {
	if r == (RiseLimit{}) || target <= prev {
		return target
	}
	up := max(prev+time.Duration(float64(prev)*r.Factor), prev+r.Step)
	return min(target, up)
}

// RiseForget is how long a flow's last applied delay is remembered while
// the flow is idle. SRTT does not decay while a flow is idle, so the
// ramp carries on from where it was; after this long we forget the flow
// (bounded memory) and its ramp restarts from 0, which is only slower.
const RiseForget = 10 * time.Second

// riseKey is one direction of one flow: the write-direction packets
// (ACKs, small segments) are the RTT samples of the initiator's SRTT, the
// read-direction data segments those of the target's, so each direction
// ramps on its own.
type riseKey struct {
	flow FlowKey
	dir  direction.Direction
}

type riseState struct {
	prev time.Duration // delay applied to the previous packet
	seen time.Time     // that packet's arrival
	ack  uint32        // write direction: highest acknowledgment number
	n    uint32        // read direction: data packets seen
	// epoch is its consumer's when it was recorded: an entry of another
	// epoch is forgotten (see Delayer.Forget).
	epoch uint64
}

// seqAfter reports whether sequence number a is after b (RFC 1982).
func seqAfter(a, b uint32) bool { return int32(a-b) > 0 }

// RiseStats say how much the rise limit held delays below the requested
// ones, apart from the delay errors of Stats (which compare a packet's
// release with the delay it was given).
type RiseStats struct {
	Limited      uint64        // packets given less delay than requested
	ShortfallP50 time.Duration // requested minus applied, of recent limited packets
	ShortfallMax time.Duration
	Flows        int // flow directions whose last delay is remembered
	// NewsPassed counts small segments not delayed (AckDelay off)
	// because they acknowledged more than one segment of new data; see
	// ackNewsLimit.
	NewsPassed uint64
}

// limitRise returns the delay to apply to a packet of f (of consumer c)
// in direction dir with acknowledgment number ack, asked to get delay,
// and remembers it as the flow's last. d.mu held.
func (d *Delayer) limitRise(c *consumer, f FlowKey, dir direction.Direction, ack uint32, delay time.Duration, now time.Time) time.Duration {
	d.sweep(now)
	k := riseKey{f, dir}
	delay = max(delay, 0)
	st, known := d.rise[k]
	if known && (now.Sub(st.seen) >= RiseForget || st.epoch != c.epoch) {
		// Forgotten, whether or not the sweep has come by yet: the
		// sweep looks at a few entries a packet, in random order.
		delete(d.rise, k)
		st, known = riseState{}, false
	}
	sample := !known
	if dir == direction.Read {
		st.n++
		sample = st.n%2 == 1
	} else if known && seqAfter(ack, st.ack) {
		sample = true
	}
	if !known || seqAfter(ack, st.ack) {
		st.ack = ack
	}
	applied := min(delay, st.prev)
	if sample || d.Rise == (RiseLimit{}) {
		applied = d.Rise.Next(st.prev, delay)
	}
	if applied < delay {
		d.limited++
		d.shorts[d.nshort%len(d.shorts)] = delay - applied
		d.nshort++
	}
	if applied == 0 {
		// Absent means 0: a flow that is not delayed costs no memory.
		delete(d.rise, k)
	} else {
		if !known && len(d.rise) >= MaxFlows {
			evictOne(d.rise)
		}
		st.prev, st.seen, st.epoch = applied, now, c.epoch
		d.rise[k] = st
	}
	return applied
}

// RiseStats returns the rise limit's counters.
func (d *Delayer) RiseStats() RiseStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := RiseStats{Limited: d.limited, NewsPassed: d.newsPassed}
	// Not len(d.rise): the entries of forgotten consumers stay until the
	// sweep comes by. Only tests and the lab ask.
	for k, st := range d.rise {
		if d.current(k.flow.Dst, st.epoch) {
			s.Flows++
		}
	}
	n := min(d.nshort, len(d.shorts))
	if n > 0 {
		e := slices.Clone(d.shorts[:n])
		slices.Sort(e)
		s.ShortfallP50 = e[n/2]
		s.ShortfallMax = e[n-1]
	}
	return s
}
