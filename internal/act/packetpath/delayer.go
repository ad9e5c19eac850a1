package packetpath

import (
	"cmp"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/minheap"
)

// held is one packet waiting for its release time.
type held struct {
	id   uint32
	flow FlowKey
	at   time.Time // release time
	seq  uint64    // arrival order, to break ties FIFO
	gen  uint64    // its flow's generation (see takeFlow)
}

// heldOrder orders held packets by release time, FIFO among equal
// times: the heap's order.
func heldOrder(a, b held) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

func heldBefore(a, b held) bool { return heldOrder(a, b) < 0 }

// flowState tracks the packets of one flow still in the delayer.
type flowState struct {
	last    time.Time // release time of the flow's newest held packet
	pending int       // held or being released; > 0 forbids accepting at once
	// queue has the ids of its held packets in release order (a flow's
	// release times never decrease, so the heap releases them in this
	// order too), for takeFlow.
	queue []uint32
	gen   uint64 // tells its packets in the heap from a taken flow's
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
	heap    minheap.Heap[held]
	stale   int // entries of the heap whose flow was taken (see takeFlow)
	gens    uint64
	flows   map[FlowKey]*flowState
	seq     uint64
	held    uint64
	passed  uint64
	bypass  uint64
	errs    [512]time.Duration // ring of recent delay errors
	nerr    int
	scratch []held
	ids     []uint32

	// The consumers (destinations) and their shares of the backlog: see
	// consumers.go.
	cons      map[netip.Addr]*consumer
	bypassers map[netip.Addr]*consumer // those that ever lost their delay
	holding   int                      // consumers with packets held
	epochs    uint64                   // the last epoch given out
	warned    time.Time                // the last hog warning
	// Warn, when set, is told (outside the lock) that a consumer holding
	// most of the backlog lost its delay, or that the backlog is at its
	// hard limit; at most every hogWarnEvery.
	Warn func(c ConsumerStats, backlog int, hard bool)

	rise    map[riseKey]riseState
	limited uint64
	shorts  [512]time.Duration // ring of recent rise shortfalls
	nshort  int

	acksPassed uint64 // pure ACKs accepted at once because AckDelay is off
	newsPassed uint64 // small segments not delayed because they acknowledge new data
	acks       map[FlowKey]ackSeen

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
// packets. maxBacklog is the backlog shared by all consumers; beyond it
// each may hold its share, and beyond the hard limit (twice it) every
// packet is accepted at once (fail open) and counted as bypassed. See
// consumers.go.
func NewDelayer(clk clock.Clock, maxBacklog int, release func(ids []uint32)) *Delayer {
	return &Delayer{
		clk: clk, release: release, maxBacklog: maxBacklog,
		heap:      minheap.New(heldBefore),
		flows:     map[FlowKey]*flowState{},
		cons:      map[netip.Addr]*consumer{},
		bypassers: map[netip.Addr]*consumer{},
		rise:      map[riseKey]riseState{},
		acks:      map[FlowKey]ackSeen{},
		Rise:      DefaultRiseLimit,
	}
}

// Submit takes one packet of direction dir with acknowledgment number ack
// that arrived at now and should be delayed by delay; the delay it gets
// may be less while the flow's delay is rising (see RiseLimit). It
// returns true when the caller must accept the packet itself at once: no
// delay and nothing of its flow waiting, or its consumer is over its
// share of the backlog, or the backlog is at its hard limit.
func (d *Delayer) Submit(id uint32, f FlowKey, dir direction.Direction, ack uint32, delay time.Duration, now time.Time) bool {
	d.mu.Lock()
	c := d.consumerOf(f.Dst, now)
	if dir == direction.Write && !d.AckDelay && d.ackNews(c, f, ack, now) > ackNewsLimit {
		// See ackNewsLimit. The ramp is left as it was: this undelayed
		// sample only lowers the sender's SRTT, which is the safe side.
		delay = 0
		d.newsPassed++
	} else {
		delay = d.limitRise(c, f, dir, ack, delay, now)
	}
	fs := d.flows[f]
	busy := fs != nil
	if !busy && delay <= 0 {
		d.passed++
		d.mu.Unlock()
		return true
	}
	if ok, hard := d.admit(c); !ok {
		// It leaves at once: its RTT sample is low, so the ramp of its
		// flow restarts from 0 (slower, never faster, than the sender's
		// SRTT can follow). Earlier packets of its flow still held leave
		// first, in their order (fail open per flow: the new packet must
		// not overtake them).
		delete(d.rise, riseKey{f, dir})
		warn := d.bypassed(f.Dst, c, hard, now)
		d.passed++
		var ids []uint32
		if busy {
			ids = d.takeFlow(f)
		}
		d.mu.Unlock()
		if warn != nil && d.Warn != nil {
			d.Warn(warn.ConsumerStats, warn.backlog, warn.hard)
		}
		if busy {
			d.release(ids)
		}
		return true
	}
	at := now.Add(delay)
	if busy && fs.last.After(at) {
		at = fs.last
	}
	if !busy {
		d.gens++
		fs = &flowState{gen: d.gens}
		d.flows[f] = fs
	}
	fs.last = at
	fs.pending++
	fs.queue = append(fs.queue, id)
	d.seq++
	d.heap.Push(held{id: id, flow: f, at: at, seq: d.seq, gen: fs.gen})
	d.held++
	d.hold(c)
	d.mu.Unlock()
	return false
}

// takeFlow takes the held packets of f out and returns their ids in
// release order; the flow then has nothing pending, so its next packets
// pass without it. Their heap entries stay, stale: the flow's next
// packets have another generation, and ReleaseDue and next skip them.
// A consumer over its share takes a flow out at every packet of a busy
// flow, so this must not cost a pass over the heap; compact does one
// only once the stale entries are as many as the live ones. d.mu held.
func (d *Delayer) takeFlow(f FlowKey) []uint32 {
	fs := d.flows[f]
	ids := fs.queue
	delete(d.flows, f)
	d.stale += len(ids)
	d.unhold(f.Dst, len(ids))
	d.passed += uint64(len(ids))
	if d.stale > compactAfter && 2*d.stale > d.heap.Len() {
		d.compact()
	}
	return ids
}

// compactAfter is how many stale heap entries are let be before a
// compaction is considered.
const compactAfter = 1024

// isStale reports whether a heap entry's flow was taken out. d.mu held.
func (d *Delayer) isStale(p held) bool {
	fs := d.flows[p.flow]
	return fs == nil || fs.gen != p.gen
}

// compact removes the stale entries from the heap. d.mu held.
func (d *Delayer) compact() {
	keep := d.heap.Items[:0]
	for _, p := range d.heap.Items {
		if !d.isStale(p) {
			keep = append(keep, p)
		}
	}
	clear(d.heap.Items[len(keep):])
	d.heap.Items = keep
	d.heap.Init()
	d.stale = 0
}

// backlog is how many packets are held. d.mu held.
func (d *Delayer) backlog() int { return d.heap.Len() - d.stale }

// popStale drops stale entries from the top of the heap. d.mu held.
func (d *Delayer) popStale() {
	for d.stale > 0 && d.heap.Len() > 0 && d.isStale(d.heap.Items[0]) {
		d.heap.Pop()
		d.stale--
	}
}

// sweepBatch is how many remembered flows each packet looks at for
// forgetting: the sweep is spread over the packets, so the real-time
// thread never walks a whole table at once (a flood of flows made that a
// multi-millisecond stall). Go starts each map walk at a random place, so
// every entry is looked at within a few times len/sweepBatch packets;
// MaxFlows bounds the tables meanwhile.
const sweepBatch = 4

// sweep forgets a few ramps and acknowledgment numbers idle for
// RiseForget or of a forgotten consumer (see Forget), and consumers idle
// that long with nothing held. d.mu held.
func (d *Delayer) sweep(now time.Time) {
	n := 0
	for k, st := range d.rise {
		if now.Sub(st.seen) >= RiseForget || !d.current(k.flow.Dst, st.epoch) {
			delete(d.rise, k)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	n = 0
	for f, a := range d.acks {
		if now.Sub(a.seen) >= RiseForget || !d.current(f.Dst, a.epoch) {
			delete(d.acks, f)
		}
		if n++; n >= sweepBatch {
			break
		}
	}
	n = 0
	for a, c := range d.cons {
		if now.Sub(c.seen) >= RiseForget && c.held == 0 {
			d.dropConsumer(a)
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
	ack   uint32 // highest acknowledgment number of the flow's packets
	seen  time.Time
	epoch uint64 // of its consumer when recorded (see Forget)
}

// ackNews records ack as sent on flow f of consumer c and returns how
// many bytes it acknowledges beyond the flow's earlier packets (0 for
// the first one seen). d.mu held.
func (d *Delayer) ackNews(c *consumer, f FlowKey, ack uint32, now time.Time) uint32 {
	a, known := d.acks[f]
	if known && a.epoch != c.epoch {
		a, known = ackSeen{}, false
	}
	var news uint32
	if known && seqAfter(ack, a.ack) {
		news = ack - a.ack
	}
	if !known || seqAfter(ack, a.ack) {
		a.ack = ack
	}
	a.seen, a.epoch = now, c.epoch
	if _, there := d.acks[f]; !there && len(d.acks) >= MaxFlows {
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
func (d *Delayer) SubmitPureAck(id uint32, f FlowKey, dir direction.Direction, ack uint32, delay time.Duration, now time.Time) bool {
	if d.AckDelay || dir != direction.Write {
		return d.Submit(id, f, dir, ack, delay, now)
	}
	d.mu.Lock()
	c := d.consumerOf(f.Dst, now)
	d.ackNews(c, f, ack, now)
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
	for d.popStale(); d.heap.Len() > 0 && !d.heap.Items[0].at.After(now); d.popStale() {
		p := d.heap.Pop()
		fs := d.flows[p.flow]
		fs.queue = fs.queue[1:]
		due = append(due, p)
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
		// A flow taken out meanwhile (by another caller) is gone.
		if fs := d.flows[p.flow]; fs != nil && fs.gen == p.gen {
			if fs.pending--; fs.pending == 0 {
				delete(d.flows, p.flow)
			}
		}
		d.unhold(p.flow.Dst, 1)
		d.errs[d.nerr%len(d.errs)] = done.Sub(p.at)
		d.nerr++
	}
	d.passed += uint64(len(due))
	d.mu.Unlock()
	return len(due)
}

// Quiet reports whether nothing for dst has arrived since before now -
// gap and nothing for it is held.
func (d *Delayer) Quiet(dst netip.Addr, now time.Time, gap time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cons[dst]
	return c == nil || now.Sub(c.seen) >= gap && c.held == 0
}

// Next returns the earliest release time.
func (d *Delayer) Next() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.popStale()
	if d.heap.Len() == 0 {
		return time.Time{}, false
	}
	return d.heap.Items[0].at, true
}

// ReleaseAll releases everything held at once: on the way out we fail
// open.
func (d *Delayer) ReleaseAll() int { return d.ReleaseDue(time.Unix(1<<40, 0)) }

// Stats returns the delayer's counters.
func (d *Delayer) Stats() Stats {
	// Copy under the lock, sort after it: a caller from outside the
	// packet thread (tests) must not hold packets up while it sorts.
	d.mu.Lock()
	s := Stats{PacketsHeld: d.held, PacketsPassed: d.passed, Backlog: d.backlog(), Bypassed: d.bypass, AcksPassed: d.acksPassed}
	n := min(d.nerr, len(d.errs))
	e := slices.Clone(d.errs[:n])
	top := d.topBypassers()
	d.mu.Unlock()
	if top != nil {
		s.Bypassers = SortBypassers(top)
	}
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

// MaxFlows caps each of the delayer's per-flow tables (remembered ramps,
// acknowledgment numbers) and the per-destination records: a
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
