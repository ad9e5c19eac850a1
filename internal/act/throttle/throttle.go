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
//     writers (see "Arming" in package nfqbackend): also "-A INPUT -j
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
// package packetpath), nfqbackend's kernelQueueLen in the kernel's
// queue (beyond it the kernel accepts: fail open), packetpath.MaxFlows
// entries in each per-flow table (about 20 MiB in all at the caps,
// measured by TestDelayerHostileLoad), swept a few entries per packet
// rather than all at once on the real-time thread.
//
// Backends: nfqueue (default; per-flow FIFO delays in user space, fail
// open), netem (the thesis's kernel path, where sch_netem exists), htb
// (read bandwidth caps), edt (tc/BPF departure times with fq, entries
// that lapse unless renewed: fail open in the kernel) and dry-run (logs
// only); a delay backend with an htb beside it for rates is a Composite.
// See Open.
//
// This package is what the daemon imports: Backend and the interfaces
// beside it, Open with its Options and their validation, the choice of
// the edt backend (Auto), the dry-run backend, Composite, InForce and
// SweepDead, and the names of its parts the daemon uses. The parts are
// packages of their own, none of which imports it: plan (the State and
// what it means on the wire), nfqbackend (the nfqueue backend: its
// packet thread, standby, members and arming), packetpath (the nfqueue
// backend's user-space delayer), owned (the chain, sets and lock an
// instance owns, and their reconciler), qdisc (the netem, htb and edt
// backends) and wire (the wire counters).
package throttle

import (
	"context"
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
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
