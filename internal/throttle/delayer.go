package throttle

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

// flowKey identifies a TCP flow from the target to a consumer. The source
// address is left out: the target sends from its own address, and on one
// host the ports already make flows distinct.
type flowKey struct {
	dst          netip.Addr
	sport, dport uint16
}

// parsed is what the delayer needs to know about a packet.
type parsed struct {
	flow    flowKey
	payload int    // TCP payload bytes
	ack     uint32 // acknowledgment number
	flags   uint8  // TCP flags (FIN, SYN, RST, ...)
}

// TCP flags that occupy sequence space or end a connection: segments
// carrying them stay in order with data even when they have no payload.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
)

// pureAck reports whether the segment is a pure ACK: no payload and no
// SYN, FIN or RST. Such a segment occupies no sequence space.
func (p parsed) pureAck() bool {
	return p.payload == 0 && p.flags&(tcpFIN|tcpSYN|tcpRST) == 0
}

// parseIPv4TCP reads the flow and TCP payload length of an IPv4 packet.
// pkt may be truncated to its headers; total is the packet's full length
// (the kernel's NFQA_CAP_LEN), or 0 to use the IP header's total length.
// With NFQA_CFG_F_GSO a packet may be an unsegmented GSO super-packet,
// which is why the length must come from the kernel rather than a count
// of segments.
func parseIPv4TCP(pkt []byte, total int) (parsed, bool) {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 6 {
		return parsed{}, false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+20 {
		return parsed{}, false
	}
	if total == 0 {
		total = int(binary.BigEndian.Uint16(pkt[2:4]))
	}
	tcp := pkt[ihl:]
	doff := int(tcp[12]>>4) * 4
	p := parsed{
		flow: flowKey{
			dst:   netip.AddrFrom4([4]byte(pkt[16:20])),
			sport: binary.BigEndian.Uint16(tcp[0:2]),
			dport: binary.BigEndian.Uint16(tcp[2:4]),
		},
		payload: total - ihl - doff,
		ack:     binary.BigEndian.Uint32(tcp[8:12]),
		flags:   tcp[13],
	}
	if p.payload < 0 {
		p.payload = 0
	}
	return p, true
}

// parseTCP reads an IPv4 or IPv6 packet (see parseIPv4TCP, parseIPv6TCP).
func parseTCP(pkt []byte, total int) (parsed, bool) {
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		return parseIPv6TCP(pkt, total)
	}
	return parseIPv4TCP(pkt, total)
}

// parseIPv6TCP is parseIPv4TCP for IPv6. Only a TCP header right after
// the fixed header is read: the target's own segments carry no extension
// headers; a packet that has them is not parsed (it passes at once).
func parseIPv6TCP(pkt []byte, total int) (parsed, bool) {
	const hdr = 40
	if len(pkt) < hdr+20 || pkt[0]>>4 != 6 || pkt[6] != 6 {
		return parsed{}, false
	}
	if total == 0 {
		total = hdr + int(binary.BigEndian.Uint16(pkt[4:6]))
	}
	tcp := pkt[hdr:]
	doff := int(tcp[12]>>4) * 4
	p := parsed{
		flow: flowKey{
			dst:   netip.AddrFrom16([16]byte(pkt[24:40])).Unmap(),
			sport: binary.BigEndian.Uint16(tcp[0:2]),
			dport: binary.BigEndian.Uint16(tcp[2:4]),
		},
		payload: total - hdr - doff,
		ack:     binary.BigEndian.Uint32(tcp[8:12]),
		flags:   tcp[13],
	}
	if p.payload < 0 {
		p.payload = 0
	}
	return p, true
}

// held is one packet waiting for its release time.
type held struct {
	id   uint32
	flow flowKey
	at   time.Time // release time
	seq  uint64    // arrival order, to break ties FIFO
}

// heldHeap is a min-heap of held packets by release time, FIFO among
// equal times. It is typed rather than a container/heap: that one boxes
// every pushed packet in an interface, an allocation per packet.
type heldHeap []held

func (h heldHeap) less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}

func (h *heldHeap) push(p held) {
	*h = append(*h, p)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

func (h *heldHeap) pop() held {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	q.down(0)
	*h = q
	return top
}

// down moves element i down to its place.
func (q heldHeap) down(i int) {
	n := len(q)
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
}

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

// next returns the delay to apply to a packet whose flow had prev and
// which is asked to get target. The zero RiseLimit does not limit.
func (r RiseLimit) next(prev, target time.Duration) time.Duration {
	if r == (RiseLimit{}) || target <= prev {
		return target
	}
	up := max(prev+time.Duration(float64(prev)*r.Factor), prev+r.Step)
	return min(target, up)
}

// riseForget is how long a flow's last applied delay is remembered while
// the flow is idle. SRTT does not decay while a flow is idle, so the
// ramp carries on from where it was; after this long we forget the flow
// (bounded memory) and its ramp restarts from 0, which is only slower.
const riseForget = 10 * time.Second

// riseKey is one direction of one flow: the write-direction packets
// (ACKs, small segments) are the RTT samples of the initiator's SRTT, the
// read-direction data segments those of the target's, so each direction
// ramps on its own.
type riseKey struct {
	flow flowKey
	dir  Direction
}

type riseState struct {
	prev time.Duration // delay applied to the previous packet
	seen time.Time     // that packet's arrival
	ack  uint32        // write direction: highest acknowledgment number
	n    uint32        // read direction: data packets seen
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

// flowState tracks the packets of one flow still in the delayer.
type flowState struct {
	last    time.Time // release time of the flow's newest held packet
	pending int       // held or being released; > 0 forbids accepting at once
}

// Delayer holds packets until their release time and then hands them to
// release, in time order. A packet's release time is max(arrival + delay,
// release time of the flow's previous packet): a packet never overtakes
// an earlier one of its flow, even when the delay is lowered, because
// reordering makes TCP retransmit.
//
// The Delayer does not wait by itself: its owner asks for the next
// release time and calls ReleaseDue (the nfqueue backend from its
// real-time packet thread, tests with a fake clock). Its methods are safe
// for concurrent use, but the backend calls all of them from that one
// thread, so the lock is never contended there: a normal-priority
// goroutine holding it while preempted would stall every held packet.
type Delayer struct {
	clk        clock.Clock
	release    func(ids []uint32)
	maxBacklog int

	mu      sync.Mutex
	heap    heldHeap
	flows   map[flowKey]flowState
	seen    map[netip.Addr]time.Time // last packet per destination
	seq     uint64
	held    uint64
	passed  uint64
	bypass  uint64
	errs    [512]time.Duration // ring of recent delay errors
	nerr    int
	scratch []held
	ids     []uint32

	rise    map[riseKey]riseState
	limited uint64
	shorts  [512]time.Duration // ring of recent rise shortfalls
	nshort  int

	acksPassed uint64 // pure ACKs accepted at once because AckDelay is off
	newsPassed uint64 // small segments not delayed because they acknowledge new data
	acks       map[flowKey]ackSeen

	// AckDelay makes SubmitPureAck hold write-direction pure ACKs like
	// any other packet; when false they leave at once. Set it before the
	// first Submit. See SubmitPureAck for why false is safe and why it is
	// the default of the nfqueue backend.
	AckDelay bool

	// Rise limits how fast a flow's delay rises; NewDelayer sets
	// DefaultRiseLimit, the zero RiseLimit turns the limit off. Set it
	// before the first Submit.
	Rise RiseLimit
}

// NewDelayer returns a delayer that calls release with the ids of due
// packets. maxBacklog bounds memory: beyond it packets are accepted at
// once (fail open) and counted as bypassed.
func NewDelayer(clk clock.Clock, maxBacklog int, release func(ids []uint32)) *Delayer {
	return &Delayer{
		clk: clk, release: release, maxBacklog: maxBacklog,
		flows: map[flowKey]flowState{},
		seen:  map[netip.Addr]time.Time{},
		rise:  map[riseKey]riseState{},
		acks:  map[flowKey]ackSeen{},
		Rise:  DefaultRiseLimit,
	}
}

// limitRise returns the delay to apply to a packet of f in direction dir
// with acknowledgment number ack, asked to get delay, and remembers it as
// the flow's last. d.mu held.
func (d *Delayer) limitRise(f flowKey, dir Direction, ack uint32, delay time.Duration, now time.Time) time.Duration {
	d.sweep(now)
	k := riseKey{f, dir}
	delay = max(delay, 0)
	st, known := d.rise[k]
	if known && now.Sub(st.seen) >= riseForget {
		// Forgotten, whether or not the sweep has come by yet: the
		// sweep looks at a few entries a packet, in random order.
		delete(d.rise, k)
		st, known = riseState{}, false
	}
	sample := !known
	if dir == Read {
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
		applied = d.Rise.next(st.prev, delay)
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
		st.prev, st.seen = applied, now
		d.rise[k] = st
	}
	return applied
}

// Submit takes one packet of direction dir with acknowledgment number ack
// that arrived at now and should be delayed by delay; the delay it gets
// may be less while the flow's delay is rising (see RiseLimit). It
// returns true when the caller must accept the packet itself at once: no
// delay and nothing of its flow waiting, or the backlog is full.
func (d *Delayer) Submit(id uint32, f flowKey, dir Direction, ack uint32, delay time.Duration, now time.Time) bool {
	d.mu.Lock()
	d.see(f.dst, now)
	if dir == Write && !d.AckDelay && d.ackNews(f, ack, now) > ackNewsLimit {
		// See ackNewsLimit. The ramp is left as it was: this undelayed
		// sample only lowers the sender's SRTT, which is the safe side.
		delay = 0
		d.newsPassed++
	} else {
		delay = d.limitRise(f, dir, ack, delay, now)
	}
	fs, busy := d.flows[f]
	if !busy && delay <= 0 {
		d.passed++
		d.mu.Unlock()
		return true
	}
	if len(d.heap) >= d.maxBacklog {
		// It leaves at once: its RTT sample is low, so the ramp of its
		// flow restarts from 0 (slower, never faster, than the sender's
		// SRTT can follow). Earlier packets of its flow still held leave
		// first, in their order (fail open per flow: the new packet must
		// not overtake them).
		delete(d.rise, riseKey{f, dir})
		d.bypass++
		d.passed++
		if !busy {
			d.mu.Unlock()
			return true
		}
		ids := d.takeFlow(f)
		d.mu.Unlock()
		d.release(ids)
		return true
	}
	at := now.Add(delay)
	if busy && fs.last.After(at) {
		at = fs.last
	}
	fs.last = at
	fs.pending++
	d.flows[f] = fs
	d.seq++
	d.heap.push(held{id: id, flow: f, at: at, seq: d.seq})
	d.held++
	d.mu.Unlock()
	return false
}

// takeFlow removes the held packets of f from the heap and returns their
// ids in release order; the flow then has nothing pending. It costs a
// pass over the heap, only when the backlog overflows, and empties the
// flow, so its next packets pass without it. d.mu held.
func (d *Delayer) takeFlow(f flowKey) []uint32 {
	var mine []held
	keep := d.heap[:0]
	for _, p := range d.heap {
		if p.flow == f {
			mine = append(mine, p)
		} else {
			keep = append(keep, p)
		}
	}
	d.heap = keep
	for i := len(d.heap)/2 - 1; i >= 0; i-- {
		d.heap.down(i)
	}
	slices.SortFunc(mine, func(a, b held) int {
		if a.at.Equal(b.at) {
			return int(a.seq - b.seq)
		}
		return a.at.Compare(b.at)
	})
	ids := make([]uint32, len(mine))
	for i, p := range mine {
		ids[i] = p.id
	}
	delete(d.flows, f)
	d.passed += uint64(len(mine))
	return ids
}

// sweepBatch is how many remembered flows each packet looks at for
// forgetting: the sweep is spread over the packets, so the real-time
// thread never walks a whole table at once (a flood of flows made that a
// multi-millisecond stall). Go starts each map walk at a random place, so
// every entry is looked at within a few times len/sweepBatch packets;
// MaxFlows bounds the tables meanwhile.
const sweepBatch = 4

// sweep forgets a few ramps and acknowledgment numbers idle for
// riseForget. d.mu held.
func (d *Delayer) sweep(now time.Time) {
	n := 0
	for k, st := range d.rise {
		if now.Sub(st.seen) >= riseForget {
			delete(d.rise, k)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	n = 0
	for f, a := range d.acks {
		if now.Sub(a.seen) >= riseForget {
			delete(d.acks, f)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	n = 0
	for a, t := range d.seen {
		if now.Sub(t) >= riseForget {
			delete(d.seen, a)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
}

// ackNewsLimit is, with AckDelay off, the most newly acknowledged data
// (bytes beyond the highest acknowledgment number the flow sent before) a
// held small segment may carry; one that acknowledges more is not
// delayed. Passing pure ACKs at once is not enough by itself: when the
// target's ACK of a write's last data segments is delayed (delayed ACK,
// pingpong mode) it rides on the SCSI Response, and holding the
// response then delays the sender's RTT sample with more than one
// segment in flight, where its loss-probe timer is 2·SRTT plus a jiffy
// or two: the race of the pure ACKs again (the live test saw one probe in
// 10 s). With one segment in flight (the 48-byte command an R2T answers)
// Linux adds 200 ms (TCP_RTO_MIN) to the probe timeout, so acknowledging
// up to one full segment (an Ethernet MSS, 1448 bytes with timestamps) is
// safe to delay. The writer loses our delay only on those responses.
const ackNewsLimit = 1448

type ackSeen struct {
	ack  uint32 // highest acknowledgment number of the flow's packets
	seen time.Time
}

// ackNews records ack as sent on flow f and returns how many bytes it
// acknowledges beyond the flow's earlier packets (0 for the first one
// seen). d.mu held.
func (d *Delayer) ackNews(f flowKey, ack uint32, now time.Time) uint32 {
	a, known := d.acks[f]
	var news uint32
	if known && seqAfter(ack, a.ack) {
		news = ack - a.ack
	}
	if !known || seqAfter(ack, a.ack) {
		a.ack = ack
	}
	a.seen = now
	if !known && len(d.acks) >= MaxFlows {
		evictOne(d.acks)
	}
	d.acks[f] = a
	return news
}

// SubmitPureAck is Submit for a pure ACK (no payload, no SYN, FIN or
// RST). With AckDelay off, a write-direction pure ACK is not held at all:
// it returns true at once, even while an earlier data segment of its flow
// is still held, and it neither takes nor sets the flow's ramp (only the
// held segments are RTT samples the sender sees delayed).
//
// Why letting a pure ACK overtake held data of its flow is safe. A
// zero-length segment occupies no sequence space: the receiver processes
// its ACK and window (tcp_ack) and tcp_data_queue drops it, so it can
// never be "out of order" data. The held data segment, released later,
// carries an older ACK number and an older window: tcp_ack ignores an ACK
// below snd_una as old, and tcp_may_update_window refuses a window whose
// segment is older than the last update. Its data is queued by its own
// sequence number as usual. Only data must stay in order, and it does:
// among data-bearing segments (and SYN, FIN, RST, which use sequence
// space or end the connection) the per-flow FIFO is unchanged.
//
// Why not hold them. A synchronous iSCSI writer is clocked by the R2T and
// the SCSI Response (small data segments), not by pure ACKs: holding only
// those slows it as much. Holding the pure ACKs of its Data-Out as well
// puts our delay into its RTT samples, and on a fast link (SRTT ~50 µs,
// loss-probe timeout one 4 ms jiffy that fires anywhere 0–4 ms after it is
// armed) any delayed ACK may lose the race with the probe timer: a
// spurious retransmission that no ramp avoids. Bulk TCP streams, which
// the ACK clock does pace, need AckDelay.
func (d *Delayer) SubmitPureAck(id uint32, f flowKey, dir Direction, ack uint32, delay time.Duration, now time.Time) bool {
	if d.AckDelay || dir != Write {
		return d.Submit(id, f, dir, ack, delay, now)
	}
	d.mu.Lock()
	d.see(f.dst, now)
	d.ackNews(f, ack, now)
	d.acksPassed++
	d.passed++
	d.mu.Unlock()
	return true
}

// ReleaseDue releases every packet due at now and returns how many. The
// flows' pending counts drop only after release returned, so a packet
// accepted at once by Submit cannot overtake one being released. One
// caller at a time: the batch buffers are reused, and releases from two
// threads could leave in either order anyway.
func (d *Delayer) ReleaseDue(now time.Time) int {
	d.mu.Lock()
	due := d.scratch[:0]
	for len(d.heap) > 0 && !d.heap[0].at.After(now) {
		due = append(due, d.heap.pop())
	}
	d.scratch = due
	ids := d.ids[:0]
	for _, p := range due {
		ids = append(ids, p.id)
	}
	d.ids = ids
	d.mu.Unlock()
	if len(due) == 0 {
		return 0
	}
	d.release(ids)
	done := d.clk.Now()
	d.mu.Lock()
	for _, p := range due {
		fs := d.flows[p.flow]
		fs.pending--
		if fs.pending == 0 {
			delete(d.flows, p.flow)
		} else {
			d.flows[p.flow] = fs
		}
		d.errs[d.nerr%len(d.errs)] = done.Sub(p.at)
		d.nerr++
	}
	d.passed += uint64(len(due))
	d.mu.Unlock()
	return len(due)
}

// see records an arrival for dst, within MaxFlows destinations. d.mu held.
func (d *Delayer) see(dst netip.Addr, now time.Time) {
	if _, ok := d.seen[dst]; !ok && len(d.seen) >= MaxFlows {
		evictOne(d.seen)
	}
	d.seen[dst] = now
}

// Quiet reports whether nothing for dst has arrived since before now -
// gap and nothing for it is held.
func (d *Delayer) Quiet(dst netip.Addr, now time.Time, gap time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.seen[dst]; ok && now.Sub(t) < gap {
		return false
	}
	for f := range d.flows {
		if f.dst == dst {
			return false
		}
	}
	return true
}

// Forget drops the arrival times and remembered delays of destinations
// not in keep. A destination that left the queue's set may go on sending
// unseen and undelayed, its SRTT falling: when it comes back its ramp
// must start again from 0.
func (d *Delayer) Forget(keep func(netip.Addr) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for a := range d.seen {
		if !keep(a) {
			delete(d.seen, a)
		}
	}
	for k := range d.rise {
		if !keep(k.flow.dst) {
			delete(d.rise, k)
		}
	}
	for f := range d.acks {
		if !keep(f.dst) {
			delete(d.acks, f)
		}
	}
}

// next returns the earliest release time.
func (d *Delayer) next() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.heap) == 0 {
		return time.Time{}, false
	}
	return d.heap[0].at, true
}

// releaseAll releases everything held at once: on the way out we fail
// open.
func (d *Delayer) releaseAll() int { return d.ReleaseDue(time.Unix(1<<40, 0)) }

// Stats returns the delayer's counters.
func (d *Delayer) Stats() Stats {
	// Copy under the lock, sort after it: a caller from outside the
	// packet thread (tests) must not hold packets up while it sorts.
	d.mu.Lock()
	s := Stats{PacketsHeld: d.held, PacketsPassed: d.passed, Backlog: len(d.heap), Bypassed: d.bypass, AcksPassed: d.acksPassed}
	n := min(d.nerr, len(d.errs))
	e := slices.Clone(d.errs[:n])
	d.mu.Unlock()
	s.PureAcks = "passed"
	if d.AckDelay {
		s.PureAcks = "held"
	}
	if n > 0 {
		slices.Sort(e)
		s.DelayErrorP50 = e[n/2]
		s.DelayErrorMax = e[n-1]
	}
	return s
}

// RiseStats returns the rise limit's counters.
func (d *Delayer) RiseStats() RiseStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := RiseStats{Limited: d.limited, Flows: len(d.rise), NewsPassed: d.newsPassed}
	n := min(d.nshort, len(d.shorts))
	if n > 0 {
		e := slices.Clone(d.shorts[:n])
		slices.Sort(e)
		s.ShortfallP50 = e[n/2]
		s.ShortfallMax = e[n-1]
	}
	return s
}

// MaxFlows caps each of the delayer's per-flow tables (remembered ramps,
// acknowledgment numbers) and the per-destination arrival times: a
// consumer opening connections as fast as it can must not grow the
// daemon without bound. 65,536 entries of ~100 bytes: a few MiB each at
// most. A new flow at the cap takes the place of a random one, whose
// ramp then restarts from 0 (slower, never faster, than its sender can
// follow): a flood of flows cannot keep new ones from being throttled.
const MaxFlows = 1 << 16

// evictOne removes one entry of m, at random (Go starts each map walk at
// a random place).
func evictOne[K comparable, V any](m map[K]V) {
	for k := range m {
		delete(m, k)
		return
	}
}
