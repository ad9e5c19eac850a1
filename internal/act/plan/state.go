package plan

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/fielderr"
)

// DefaultPorts are the target ports throttled when none are configured:
// iSCSI.
var DefaultPorts = []uint16{3260}

// Group is one resource's throttle: the consumers currently in its
// throttleable set and the delay each direction gets. A Group with no
// members or zero delays costs nothing on the data path.
type Group struct {
	// Name identifies the group (the resource name); it is used, sanitised
	// and prefixed, in the names of kernel objects.
	Name       string
	Members    []netip.Addr
	Ports      []uint16 // target (source) ports; DefaultPorts when empty
	WriteDelay time.Duration
	ReadDelay  time.Duration
	// ReadRate caps the bytes per second the target sends each member
	// (the read direction); only the htb backend uses it, 0 = no cap.
	ReadRate uint64
	// Armed are consumers outside the set that the kernel puts in it
	// with their first write data segment, to be held at ArmedDelay in
	// the write direction from then on, until a later state makes them
	// members or they stop writing (see "Arming" in throttle's arm.go). The
	// nfqueue and edt backends arm; the others ignore both fields.
	Armed      []netip.Addr
	ArmedDelay time.Duration
}

// Active reports whether the group slows anything down; only active
// groups have members in their kernel set.
func (g Group) Active() bool {
	return g.WriteDelay > 0 || g.ReadDelay > 0 || g.ReadRate > 0
}

// Arms reports whether the group arms anybody.
func (g Group) Arms() bool { return len(g.Armed) > 0 && g.ArmedDelay > 0 }

// TargetPorts returns the group's target TargetPorts, DefaultPorts when none are set.
func (g Group) TargetPorts() []uint16 {
	if len(g.Ports) == 0 {
		return DefaultPorts
	}
	return g.Ports
}

// State is the complete desired throttle state.
type State struct {
	Groups []Group
}

// Stats are the data-path counters of a backend.
type Stats struct {
	PacketsHeld   uint64 // packets that were delayed
	PacketsPassed uint64 // packets released (accepted)
	Backlog       int    // packets held right now
	// DelayErrorP50 and DelayErrorMax measure how late packets leave:
	// actual hold minus the delay applied to them. The applied delay can
	// be below the requested one while a flow's delay ramps up (see
	// packetpath.RiseLimit); that shortfall is counted apart, in RiseStats.
	DelayErrorP50 time.Duration
	DelayErrorMax time.Duration
	// DelayErrorAvg is edt's, which keeps no hold times: fq's moving
	// average of how late its timer released a held flow.
	DelayErrorAvg time.Duration `json:",omitempty"`
	// YieldMax and WakeLateMax say where late packets come from (nfqueue
	// only): the longest of the packet thread's last 64 yields to the Go
	// scheduler, and the longest the kernel woke it after a release time
	// among its last 64 timed waits.
	YieldMax    time.Duration `json:",omitempty"`
	WakeLateMax time.Duration `json:",omitempty"`
	// Takeovers counts the times the nfqueue standby ran the packet path
	// because the packet thread had stalled; TakeoverMax is the longest
	// of the last 64, about how long that thread was away.
	Takeovers   uint64        `json:",omitempty"`
	TakeoverMax time.Duration `json:",omitempty"`
	// TakeoversDeclined counts the standby's looks (one a millisecond)
	// that found the packet thread away but did not take over because
	// packets still waited in the packet CPU's receive backlog.
	TakeoversDeclined uint64 `json:",omitempty"`
	// Bypassed counts packets accepted at once because their consumer was
	// over its share of the backlog, or the backlog at its hard limit
	// (fail open rather than hold unbounded memory; see package
	// packetpath).
	Bypassed uint64
	// Dropped counts packets the backend's kernel queue dropped (edt:
	// fq over its limits, which sanqos sets past any real backlog). It
	// should stay 0: each one is a packet sanqos lost.
	Dropped uint64 `json:",omitempty"`
	// Bypassers are the consumers that had packets bypassed, the most
	// first (at most 16), with their counters (nfqueue only).
	Bypassers []packetpath.ConsumerStats `json:",omitempty"`
	// Errors counts packets that could not be parsed or whose verdict
	// could not be sent (the kernel then lets them pass: fail open).
	Errors uint64
	// PureAcks says what the write direction does with pure ACKs: "held"
	// (nfqueue with AckDelay: they clock bulk uploads), "passed" (nfqueue
	// without: only small data segments, R2T and SCSI Response, are held)
	// or "" (the backend does not tell them apart).
	PureAcks string `json:",omitempty"`
	// AcksPassed counts write-direction pure ACKs accepted at once because
	// PureAcks is "passed".
	AcksPassed uint64 `json:",omitempty"`
}

// MaxPorts is the most target ports one group may have: iptables'
// multiport match takes at most 15 ports, and a rule the kernel refuses
// would fail every apply.
const MaxPorts = 15

// ValidatePorts checks a list of target ports as the backends will
// program them: every port 1–65535, at most MaxPorts distinct ones. The
// daemon's configuration and the control socket call it, so that a list
// the kernel would refuse is refused where it is given; an error is a
// *fielderr.Error of the list.
func ValidatePorts[P ~int | ~uint16](ports []P) error {
	distinct := map[int]bool{}
	for _, p := range ports {
		if p < 1 || int(p) > 65535 {
			return fielderr.New("throttle.Ports", "ports", ports, fmt.Sprintf("port %d must be between 1 and 65535 (a TCP port)", p))
		}
		distinct[int(p)] = true
	}
	if len(distinct) > MaxPorts {
		return fielderr.New("throttle.Ports", "ports", ports, fmt.Sprintf("%d ports given, at most %d fit one iptables multiport rule: list fewer ports", len(distinct), MaxPorts))
	}
	return nil
}
