package throttle

import (
	"container/heap"
	"context"
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
	payload int // TCP payload bytes
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

type heldHeap []held

func (h heldHeap) Len() int { return len(h) }
func (h heldHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h heldHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)   { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// flowState tracks the packets of one flow still in the delayer.
type flowState struct {
	last    time.Time // release time of the flow's newest held packet
	pending int       // held or being released; > 0 forbids accepting at once
}

// Delayer holds packets until their release time and then hands them to
// release, in time order, from one goroutine (Run). A packet's release
// time is max(arrival + delay, release time of the flow's previous
// packet): a packet never overtakes an earlier one of its flow, even when
// the delay is lowered, because reordering makes TCP retransmit.
type Delayer struct {
	clk        clock.Clock
	release    func(ids []uint32)
	maxBacklog int

	mu      sync.Mutex
	heap    heldHeap
	flows   map[flowKey]*flowState
	seen    map[netip.Addr]time.Time // last packet per destination
	seq     uint64
	wake    chan struct{}
	held    uint64
	passed  uint64
	bypass  uint64
	errs    [512]time.Duration // ring of recent delay errors
	nerr    int
	scratch []held

	// FineSleep, if set, sleeps precisely (nanosleep) and is used for the
	// last fineWindow before a release. Go timers wake up to 1 ms late
	// (epoll's millisecond timeout), which would add ~0.5 ms to every
	// delay on average; short precise sleeps remove that bias. Leave it
	// nil with a fake clock.
	FineSleep func(time.Duration)
}

// fineWindow is how long before a release Run switches from a Go timer to
// FineSleep: a little more than the timer's 1 ms granularity. fineStep
// bounds each precise sleep so that a newly arrived packet due sooner is
// noticed within it.
const (
	fineWindow = 1500 * time.Microsecond
	fineStep   = 250 * time.Microsecond
)

// NewDelayer returns a delayer that calls release with the ids of due
// packets. maxBacklog bounds memory: beyond it packets are accepted at
// once (fail open) and counted as bypassed.
func NewDelayer(clk clock.Clock, maxBacklog int, release func(ids []uint32)) *Delayer {
	return &Delayer{
		clk: clk, release: release, maxBacklog: maxBacklog,
		flows: map[flowKey]*flowState{},
		seen:  map[netip.Addr]time.Time{},
		wake:  make(chan struct{}, 1),
	}
}

// Submit takes one packet that arrived at now and should be delayed by
// delay. It returns true when the caller must accept the packet itself at
// once: no delay and nothing of its flow waiting, or the backlog is full.
func (d *Delayer) Submit(id uint32, f flowKey, delay time.Duration, now time.Time) bool {
	d.mu.Lock()
	d.seen[f.dst] = now
	fs := d.flows[f]
	if fs == nil && delay <= 0 {
		d.passed++
		d.mu.Unlock()
		return true
	}
	if len(d.heap) >= d.maxBacklog {
		d.bypass++
		d.passed++
		d.mu.Unlock()
		return true
	}
	at := now.Add(max(delay, 0))
	if fs == nil {
		fs = &flowState{}
		d.flows[f] = fs
	} else if fs.last.After(at) {
		at = fs.last
	}
	fs.last = at
	fs.pending++
	d.seq++
	first := len(d.heap) == 0 || at.Before(d.heap[0].at)
	heap.Push(&d.heap, held{id: id, flow: f, at: at, seq: d.seq})
	d.held++
	d.mu.Unlock()
	if first {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	return false
}

// ReleaseDue releases every packet due at now and returns how many. The
// flows' pending counts drop only after release returned, so a packet
// accepted at once by Submit cannot overtake one being released.
func (d *Delayer) ReleaseDue(now time.Time) int {
	d.mu.Lock()
	due := d.scratch[:0]
	for len(d.heap) > 0 && !d.heap[0].at.After(now) {
		due = append(due, heap.Pop(&d.heap).(held))
	}
	d.scratch = due
	d.mu.Unlock()
	if len(due) == 0 {
		return 0
	}
	ids := make([]uint32, len(due))
	for i, p := range due {
		ids[i] = p.id
	}
	d.release(ids)
	done := d.clk.Now()
	d.mu.Lock()
	for _, p := range due {
		fs := d.flows[p.flow]
		fs.pending--
		if fs.pending == 0 {
			delete(d.flows, p.flow)
		}
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

// Forget drops the arrival times of destinations not in keep.
func (d *Delayer) Forget(keep func(netip.Addr) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for a := range d.seen {
		if !keep(a) {
			delete(d.seen, a)
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

// Run releases packets on time until ctx ends, then releases everything
// still held at once: on the way out we fail open.
func (d *Delayer) Run(ctx context.Context) {
	for {
		var timer <-chan time.Time
		if at, ok := d.next(); ok {
			wait := at.Sub(d.clk.Now())
			if wait <= 0 {
				d.ReleaseDue(d.clk.Now())
				continue
			}
			if d.FineSleep != nil {
				if wait <= fineWindow {
					d.FineSleep(min(wait, fineStep))
					if ctx.Err() == nil {
						continue
					}
				}
				wait -= fineWindow
			}
			timer = d.clk.After(wait)
		}
		select {
		case <-ctx.Done():
			d.ReleaseDue(time.Unix(1<<40, 0))
			return
		case <-d.wake:
		case <-timer:
		}
		d.ReleaseDue(d.clk.Now())
	}
}

// Stats returns the delayer's counters.
func (d *Delayer) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{PacketsHeld: d.held, PacketsPassed: d.passed, Backlog: len(d.heap), Bypassed: d.bypass}
	n := min(d.nerr, len(d.errs))
	if n > 0 {
		e := slices.Clone(d.errs[:n])
		slices.Sort(e)
		s.DelayErrorP50 = e[n/2]
		s.DelayErrorMax = e[n-1]
	}
	return s
}
