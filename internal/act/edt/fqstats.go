//go:build linux

package edt

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// fq's own statistics (struct tc_fq_qdisc_stats in the kernel's
// pkt_sched.h), which the netlink library does not decode: the qdisc
// dump's TCA_XSTATS. Offsets of the fields read here; the struct only
// grows at its end.
const (
	fqStatsThrottled   = 24 // u64: times a flow was held for its next departure
	fqStatsFlowsPlimit = 32 // u64: packets dropped over the flow limit
	fqStatsUnthrottle  = 76 // u32: unthrottle_latency_ns
	fqStatsHorizonCaps = 96 // u64: departure times capped at the horizon
	fqStatsMin         = 80 // up to unthrottle_latency_ns (Linux 4.9)
	fqStatsHorizon     = 104
)

// fqStats are the fields of fq's statistics sanqos reports, with its
// queue's (struct gnet_stats_queue: packets and bytes held, drops).
type fqStats struct {
	qlen, backlog, drops                uint32
	throttled, flowsPlimit, horizonCaps uint64
	// late is fq's moving average (a new event weighs 1/8) of how late
	// its timer released a flow held for a departure time.
	late time.Duration
}

// parseFqStats decodes fq's TCA_XSTATS; ok is false when b is too short
// to be one.
func parseFqStats(b []byte) (s fqStats, ok bool) {
	if len(b) < fqStatsMin {
		return s, false
	}
	le := binary.NativeEndian
	s.throttled = le.Uint64(b[fqStatsThrottled:])
	s.flowsPlimit = le.Uint64(b[fqStatsFlowsPlimit:])
	s.late = time.Duration(le.Uint32(b[fqStatsUnthrottle:]))
	if len(b) >= fqStatsHorizon {
		s.horizonCaps = le.Uint64(b[fqStatsHorizonCaps:])
	}
	return s, true
}

// routeSocket is a route netlink socket in the namespace at nsPath (""
// for the current one), for the dumps the netlink library does not
// decode.
func routeSocket(nsPath string) (*nl.SocketHandle, error) {
	target, cur := netns.None(), netns.None()
	if nsPath != "" {
		ns, err := netns.GetFromPath(nsPath)
		if err != nil {
			return nil, fmt.Errorf("edt: network namespace %s: %w", nsPath, err)
		}
		defer ns.Close()
		c, err := netns.Get()
		if err != nil {
			return nil, fmt.Errorf("edt: this thread's network namespace: %w", err)
		}
		defer c.Close()
		target, cur = ns, c
	}
	s, err := nl.GetNetlinkSocketAt(target, cur, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("edt: route netlink socket: %w", err)
	}
	return &nl.SocketHandle{Socket: s}, nil
}

// parseQueueStats decodes the queue counters in a TCA_STATS2 attribute
// (its TCA_STATS_QUEUE: qlen, backlog, drops, each a u32) into s.
func parseQueueStats(b []byte, s *fqStats) error {
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return err
	}
	for _, a := range attrs {
		if a.Attr.Type == nl.TCA_STATS_QUEUE && len(a.Value) >= 12 {
			le := binary.NativeEndian
			s.qlen, s.backlog, s.drops = le.Uint32(a.Value), le.Uint32(a.Value[4:]), le.Uint32(a.Value[8:])
		}
	}
	return nil
}

// readFqStats dumps the qdiscs of the interface with index and decodes
// the counters of our fq, its queue's and its own, from the one dump;
// ok is false where it is not there.
func readFqStats(sock *nl.SocketHandle, index int) (s fqStats, ok bool, err error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETQDISC, unix.NLM_F_DUMP)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: sock}
	req.AddData(&nl.TcMsg{Family: nl.FAMILY_ALL, Ifindex: int32(index)})
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWQDISC)
	if err != nil {
		return s, false, fmt.Errorf("edt: dumping the qdiscs: %w", err)
	}
	for _, m := range msgs {
		tc := nl.DeserializeTcMsg(m)
		if int(tc.Ifindex) != index || tc.Handle != fqHandle || tc.Parent != netlink.HANDLE_ROOT {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[tc.Len():])
		if err != nil {
			return s, false, fmt.Errorf("edt: decoding fq's dump: %w", err)
		}
		var q fqStats
		for _, a := range attrs {
			switch a.Attr.Type {
			case nl.TCA_STATS2:
				if err := parseQueueStats(a.Value, &q); err != nil {
					return s, false, fmt.Errorf("edt: decoding fq's queue counters: %w", err)
				}
			case nl.TCA_XSTATS:
				s, _ = parseFqStats(a.Value)
			}
		}
		s.qlen, s.backlog, s.drops = q.qlen, q.backlog, q.drops
		return s, true, nil
	}
	return s, false, nil
}
