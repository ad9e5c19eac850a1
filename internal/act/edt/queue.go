//go:build linux

package edt

import (
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// fq's limits. Its defaults (10000 packets, 100 per flow, a packet
// timed more than 10 s ahead dropped) suit a host pacing its own
// sockets, whose send buffers bound what each flow queues. Here fq
// holds a throttled writer's pure ACKs for the whole delay, and no
// socket buffer bounds those: a writer with a few hundred segments in
// flight has over 100 ACKs held in one flow, and fq would drop the
// rest. sanqos never drops a packet, so a flow may fill the whole
// queue, whose limit is nfqueue's kernel queue's (4 × its default
// backlog budget), and a departure time past the horizon is capped,
// not dropped. Pacing stays off: fq paces nothing but our departure
// times, so the flows of initiators nobody delays leave as they would
// without it.
const (
	FqLimit     = 32768
	FqFlowLimit = FqLimit
)

// HeldLimit is how many packets the classifier gives a departure time
// still ahead, at most (HELD_LIMIT in bpf/edt.bpf.c): past it a packet
// passes at once, as past nfqueue's hard limit (twice its backlog
// budget of 8192), and is counted Bypassed. It is half of FqLimit, so
// that fq, which drops what comes past its limit, keeps room for the
// error of the classifier's count and for every packet on the device
// nobody delays.
const HeldLimit = 16384

func (e *EDT) fq() *netlink.Fq {
	return &netlink.Fq{
		QdiscAttrs:  netlink.QdiscAttrs{LinkIndex: e.link.Attrs().Index, Parent: netlink.HANDLE_ROOT, Handle: fqHandle},
		PacketLimit: FqLimit, FlowPacketLimit: FqFlowLimit,
		HorizonDropPolicy: netlink.HORIZON_DROP_POLICY_CAP,
	}
}

// fqLimitsOf says how q's limits differ from ours ("" where they do
// not): someone's `tc qdisc change` with fq's defaults would have it
// drop held ACKs again.
func fqLimitsOf(q *netlink.Fq) string {
	if q.PacketLimit == FqLimit && q.FlowPacketLimit == FqFlowLimit && q.HorizonDropPolicy == netlink.HORIZON_DROP_POLICY_CAP {
		return ""
	}
	return fqLimits(q.PacketLimit, q.FlowPacketLimit, q.HorizonDropPolicy)
}

func fqLimits(limit, flowLimit uint32, horizonDrop uint8) string {
	h := "horizon_drop"
	if horizonDrop == netlink.HORIZON_DROP_POLICY_CAP {
		h = "horizon_cap"
	}
	return fmt.Sprintf("limit %d flow_limit %d %s", limit, flowLimit, h)
}

// Queue is what fq holds and has dropped.
type Queue struct {
	Packets int    // held right now
	Bytes   uint32 // held right now
	// Dropped counts, since New, the packets fq dropped: over its limits
	// (which ours make unreachable in practice) or past its horizon (ours
	// caps instead). Every fq Detach removed is counted too.
	Dropped uint64
	// Late is fq's moving average of how late its timer released a held
	// flow (its unthrottle latency): the kernel path's hold error, 0
	// until fq has held one. Throttled counts the times fq held a flow
	// for a departure time, FlowLimitDrops the drops over the flow
	// limit, HorizonCaps the departure times capped at fq's horizon
	// (the fq now on the device only).
	Late                                   time.Duration
	Throttled, FlowLimitDrops, HorizonCaps uint64
}

// Queue reads our fq's counters; with no fq of ours on the device (not
// attached) it is empty but for the drops of earlier attachments.
func (e *EDT) Queue() (Queue, error) {
	q, err := e.readQueue()
	e.mu.Lock()
	q.Dropped += e.dropped
	e.mu.Unlock()
	return q, err
}

// readQueue reads the counters of the fq now on the device, from one
// qdisc dump (the daemon's record asks every tick).
func (e *EDT) readQueue() (Queue, error) {
	link, err := e.h.LinkByName(e.dev)
	if err != nil {
		return Queue{}, fmt.Errorf("edt: interface %s: %w", e.dev, err)
	}
	fs, ok, err := readFqStats(e.rt, link.Attrs().Index)
	if err != nil || !ok {
		return Queue{}, err
	}
	return Queue{Packets: int(fs.qlen), Bytes: fs.backlog, Dropped: uint64(fs.drops),
		Late: fs.late, Throttled: fs.throttled, FlowLimitDrops: fs.flowsPlimit, HorizonCaps: fs.horizonCaps}, nil
}

// keepDrops adds the drops of the fq about to be removed to the total.
func (e *EDT) keepDrops() {
	q, err := e.readQueue()
	if err != nil {
		return // the device is gone, and its fq with it
	}
	e.mu.Lock()
	e.dropped += q.Dropped
	e.mu.Unlock()
}
