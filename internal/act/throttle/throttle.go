// Package throttle is the actuator of sanqos: it delays the TCP packets a
// storage target sends to chosen consumers. Delayed pure ACKs and small
// control segments (R2T, SCSI response) slow a consumer's writes; delayed
// data segments slow its reads. Nothing is ever dropped.
//
// A Backend reconciles a desired State: the daemon hands over the complete
// state it wants every tick, and the backend changes the kernel only where
// that state differs from what it installed last.
// What another tool removes or changes behind its back (a firewall
// reload, nft flush ruleset, ipset flush, tc qdisc del) a Verifier
// backend finds by reading back what it installed, which the daemon asks
// for every few seconds; it is then re-installed (see package owned).
//
// Directions. A synchronous iSCSI writer is not clocked by pure ACKs
// alone: with InitialR2T each 64 KiB write waits for an R2T and a SCSI
// Response PDU, small data-bearing segments. So the write direction is
// segments with at most SmallSegment payload bytes (default 128), and
// pure ACKs only with the nfqueue backend's AckDelay (bulk TCP streams
// need it; iSCSI writers do not, and without it they send no spurious
// loss probes); the read direction is the larger data segments. (The
// thesis's autonomic run delayed everything sent to the writers.)
//
// A held packet still counts against its socket's bytes below TCP, so TCP
// autocorking holds a reply's sub-MSS tail until the held first part is
// released, and the tail is then delayed again: with autocorking on, a
// 64 KiB read is delayed 2d. Targets that throttle reads should run with
// net.ipv4.tcp_autocorking=0. Small write-direction segments are sent
// one at a time by a synchronous writer and are not affected.
//
// Kernel objects, all in the current network namespace, all named after
// the instance that made them (see owned.Owner; the instance is "q" and the
// queue number for nfqueue, "t" and the device for netem and htb), and
// all removed by Close and, after a crash, by the next start of any
// instance (an instance's objects are only ever removed by itself, or
// once its lock shows it dead):
//   - iptables chain SANQOS-<instance> in the mangle table, and one rule
//     "-A POSTROUTING -j SANQOS-<instance>"; nfqueue with IPv6
//     consumers: the same in ip6tables; nfqueue while it arms returning
//     writers (see "Arming" in arm.go): also "-A INPUT -j
//     SANQOS-<instance>" and the chain's SET rules;
//   - ipsets named sanqos-<instance>-<group> (hash:ip inet, with timeout
//     support; our entries are permanent) and, for IPv6 consumers,
//     sanqos-<instance>.6-<group> (hash:ip inet6);
//   - the instance lock: a flock on LockDir/<netns inode>-<instance>.lock
//     (and, best effort, the abstract unix socket
//     @sanqos-instance-<instance> older versions look for);
//   - nfqueue backend: NFQUEUE number 3260 (DefaultQueueNum);
//   - netem backend: root qdisc handle 53: on the given device, classes
//     53:1 (default) and 53:10 upwards with netem leaves 100: upwards;
//   - htb backend: root qdisc handle 54:, classes 54:1 and 54:10 upwards;
//   - edt backend: root qdisc fq handle 5e:, a clsact qdisc with the
//     sanqos-edt BPF filter on egress, and its map (see package edt).
//
// Nothing on the path while nobody is throttled (issue 35): the chains,
// their jumps and rules exist only while a set they match holds someone
// (a member, a lingering one, or an armed consumer the kernel may add);
// the qdiscs and the BPF filter are put on the device by the first
// throttle and removed DefaultIdleGrace after the last one ended (a
// qdisc removed at once would drop the packets it holds). Idle, a
// packet of the host passes no sanqos rule, queue or program;
// TestLiveIdlePathAudit checks it on each backend.
//
// Bounds under hostile load (nfqueue): DefaultMaxBacklog packets held
// for all consumers, then each consumer's share of it, and at most twice
// it in all (beyond its share or that limit a packet passes at once,
// after the held packets of its own flow: no reordering; see
// package packetpath), kernelQueueLen in the kernel's queue (beyond
// it the kernel accepts: fail open), packetpath.MaxFlows entries in each
// per-flow table (about 20 MiB in all at the caps, measured by
// TestDelayerHostileLoad), swept a few entries per packet rather than
// all at once on the real-time thread.
//
// Backends: nfqueue (default; per-flow FIFO delays in user space, fail
// open), netem (the thesis's kernel path, where sch_netem exists), htb
// (read bandwidth caps), edt (tc/BPF departure times with fq, entries
// that lapse unless renewed: fail open in the kernel) and dry-run (logs
// only); a delay backend with an htb beside it for rates is a Composite.
// See Open.
package throttle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/fielderr"
)

// Direction says which of a consumer's I/O directions is slowed down
// (package direction, the word the engine and the data path share).
type Direction = direction.Direction

// Write delays the packets that clock a consumer's writes: pure ACKs and
// small control segments (iSCSI R2T and SCSI response PDUs); Read the data
// segments that carry its reads; Both everything the target sends it.
const (
	Write = direction.Write
	Read  = direction.Read
	Both  = direction.Both
)

// ParseDirection reads "write", "read" or "both".
func ParseDirection(s string) (Direction, error) { return direction.Parse(s) }

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
	// members or they stop writing (see "Arming" in arm.go). The
	// nfqueue and edt backends arm; the others ignore both fields.
	Armed      []netip.Addr
	ArmedDelay time.Duration
}

// Active reports whether the group slows anything down; only active
// groups have members in their kernel set.
func (g Group) Active() bool {
	return g.WriteDelay > 0 || g.ReadDelay > 0 || g.ReadRate > 0
}

// armed reports whether the group arms anybody.
func (g Group) armed() bool { return len(g.Armed) > 0 && g.ArmedDelay > 0 }

// ports returns the group's target ports, DefaultPorts when none are set.
func (g Group) ports() []uint16 {
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
	// RiseLimit); that shortfall is counted apart, in RiseStats.
	DelayErrorP50 time.Duration
	DelayErrorMax time.Duration
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
	// Bypassers are the consumers that had packets bypassed, the most
	// first (at most 16), with their counters (nfqueue only).
	Bypassers []ConsumerStats `json:",omitempty"`
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

// Backend applies throttle state to the data path.
type Backend interface {
	// Name is the backend's name: nfqueue, netem, htb, edt or dry-run.
	Name() string
	// Apply reconciles the data path with s. Applying the same state twice
	// changes nothing in the kernel.
	Apply(ctx context.Context, s State) error
	// Stats returns the data-path counters.
	Stats() Stats
	// Close removes everything the backend installed. It is safe to call
	// more than once.
	Close() error
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

// Healther is a backend whose packet path can be checked for liveness
// (nfqueue: see Nfqueue.Healthy). A daemon feeds its watchdog only while
// Healthy passes; backends whose packets the kernel holds (netem, htb,
// dry-run) have nothing to check.
type Healther interface {
	Healthy(now time.Time) error
}

var _ Healther = (*Nfqueue)(nil)

// Renewer is a backend whose kernel state expires unless renewed (edt:
// a delay lapses one TTL after the daemon stops renewing it, so a dead or
// stuck daemon fails open). The daemon calls Renew every tick, whether or
// not the state changed.
type Renewer interface {
	Renew(ctx context.Context) error
}

// Verifier is a backend that can check what it installed. The daemon
// calls Verify and Resync from a goroutine of its own; both are safe
// beside Apply.
type Verifier interface {
	// Verify compares the kernel with what the backend installed and
	// returns what differs. When anything does, the backend forgets
	// what it believed installed, so that the next Apply, even of an
	// unchanged state, re-installs everything.
	Verify(ctx context.Context) ([]Drift, error)
	// Resync makes the next Apply re-install everything from scratch,
	// whatever Verify finds: the periodic backstop against what it
	// does not look at.
	Resync()
}
