package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/clock"
)

// Defaults of the nfqueue backend.
const (
	// DefaultQueueNum is the NFQUEUE number our rules send packets to.
	// Any 16-bit number works; the iSCSI port is easy to recognise in
	// iptables-save and unlikely to be used by anything else on a target.
	DefaultQueueNum = 3260
	// DefaultSmallSegment is the largest TCP payload (bytes) that counts as
	// write-direction traffic. A synchronous iSCSI writer waits for an R2T
	// and a SCSI Response PDU per command: 48-byte headers plus at most a
	// little sense data. 128 bytes keeps those and pure ACKs, and leaves
	// every read data segment (kilobytes) in the read direction.
	DefaultSmallSegment = 128
	// DefaultMaxBacklog bounds the packets held in user space; beyond it
	// packets pass at once. At 40 MB/s of 64 KiB writes and 20 ms delay the
	// backlog is a few hundred packets, so this is far from normal use.
	DefaultMaxBacklog = 8192
	// copyRange is how much of each packet the kernel copies to us: the
	// largest IPv4 header (60) plus the largest TCP header (60).
	copyRange = 120
	// kernelQueueLen is the kernel's queue limit; it must exceed our
	// backlog, since held packets stay in the kernel until their verdict.
	// Beyond it the kernel accepts packets itself (fail-open flag).
	kernelQueueLen = 4 * DefaultMaxBacklog
	// netlinkBuffer is the receive buffer of the queue socket. When it is
	// full the kernel fails open and accepts packets itself, and those
	// overtake packets we hold: a burst at line rate must fit. Each queued
	// packet costs about 500 bytes of buffer; 16 MiB holds ~30k.
	netlinkBuffer = 16 << 20
)

// rawNanosleep sleeps d precisely without telling the Go scheduler: the
// release loop's thread keeps its P for these sub-millisecond sleeps. A
// normal system call would let the scheduler hand the P away and back on
// every sleep, which costs tens of microseconds of CPU and of latency,
// thousands of times a second while traffic is held.
func rawNanosleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// forceReadBuffer sets the socket's receive buffer beyond rmem_max
// (SO_RCVBUFFORCE; we are root).
func forceReadBuffer(c *netlink.Conn, size int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
	}); err != nil {
		return err
	}
	return serr
}

// NfqueueConfig configures the nfqueue backend. Zero values take defaults.
type NfqueueConfig struct {
	QueueNum     uint16
	SmallSegment int
	MaxBacklog   int
	Firewall     Firewall // default: iptables on this machine
	Sets         Sets     // default: ipsets over netlink
	NetNS        int      // fd of the network namespace for the queue; 0: current
	Clock        clock.Clock
	Logger       *slog.Logger
	// RiseLimit bounds how fast a flow's delay rises (zero: the default,
	// DefaultRiseLimit); NoRiseLimit turns it off, which makes senders
	// send spurious loss probes whenever a delay jumps up (for tests and
	// measurements that show why the limit exists).
	RiseLimit   RiseLimit
	NoRiseLimit bool
	// AckDelay holds pure ACKs in the write direction as well. Off (the
	// default), the write direction holds only small data-bearing
	// segments (0 < payload ≤ SmallSegment: R2T, SCSI Response), which
	// clock a synchronous iSCSI writer, and its sender never sees our
	// delay in its RTT samples, so it sends no spurious loss probes (see
	// Delayer.SubmitPureAck). On, pure ACKs are held too, in order with
	// everything else: needed to slow bulk TCP streams, which the ACK
	// clock paces.
	AckDelay bool
}

// delays is the per-consumer delay table the packet path reads.
type delays map[netip.Addr]dirDelays

type dirDelays struct{ write, read time.Duration }

// of returns the delay of a segment with payload bytes: pure ACKs and
// small segments (R2T, SCSI Response) clock writes, larger ones carry
// reads.
func (d dirDelays) of(payload, small int) time.Duration {
	if payload <= small {
		return d.write
	}
	return d.read
}

// directionOf is the direction a segment with payload bytes belongs to,
// by the same rule as dirDelays.of.
func directionOf(payload, small int) Direction {
	if payload <= small {
		return Write
	}
	return Read
}

// Nfqueue is the default backend: iptables sends the packets a throttled
// consumer receives from the target ports to an NFQUEUE, and the Delayer
// holds each for the delay of its class. Only members of active groups are
// in the sets, so an idle sanqos costs no user-space work per packet.
//
// While a consumer has any delay, all its packets from the target ports go
// to the queue and are classified here by payload length: pure ACKs and
// small segments (≤ SmallSegment bytes: R2T, SCSI Response) are the write
// direction, larger data segments the read direction. Queuing only one
// class would let the other overtake it and reorder the flow. Pure ACKs
// are held only with AckDelay; without it they pass at once, which is
// safe because they carry no data (see Delayer.SubmitPureAck).
type Nfqueue struct {
	cfg   NfqueueConfig
	rec   *reconciler
	table atomic.Pointer[delays]
	del   *Delayer
	nf    *nfqueue.Nfqueue
	log   *slog.Logger

	mu      sync.Mutex
	members members
	waiting bool // a re-sync for lingering members is scheduled
	stop    chan struct{}

	cancel context.CancelFunc
	done   sync.WaitGroup
	closed bool
	errs   atomic.Uint64 // verdict and parse failures

	hookBoosted bool
	cpu         int // the packet path's CPU
}

// NewNfqueue removes what a crashed run left, binds the queue and starts
// the release loop. The rules come with the first Apply.
func NewNfqueue(ctx context.Context, cfg NfqueueConfig) (*Nfqueue, error) {
	if cfg.QueueNum == 0 {
		cfg.QueueNum = DefaultQueueNum
	}
	if cfg.SmallSegment == 0 {
		cfg.SmallSegment = DefaultSmallSegment
	}
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.Firewall == nil {
		cfg.Firewall = &Iptables{Run: ExecRunner{}}
	}
	if cfg.Sets == nil {
		cfg.Sets = Ipsets{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Nfqueue{cfg: cfg, rec: newReconciler(cfg.Firewall, cfg.Sets), log: cfg.Logger.With("backend", "nfqueue"),
		stop: make(chan struct{}), cpu: packetCPU()}
	b.table.Store(&delays{})
	if err := b.rec.reset(ctx); err != nil {
		return nil, fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	nf, err := nfqueue.Open(&nfqueue.Config{
		NetNS:        cfg.NetNS,
		NfQueue:      cfg.QueueNum,
		MaxPacketLen: copyRange,
		MaxQueueLen:  kernelQueueLen,
		Copymode:     nfqueue.NfQnlCopyPacket,
		AfFamily:     unix.AF_INET,
		// Fail open: when our queue is full the kernel accepts instead of
		// dropping; GSO: take super-packets whole instead of having the
		// kernel segment them for us.
		Flags: nfqueue.NfQaCfgFlagFailOpen | nfqueue.NfQaCfgFlagGSO,
		// A verdict that cannot be sent in 50 ms finds the socket stuck;
		// failing it (and counting the error) beats stalling every flow,
		// and the fail-open flag lets the kernel pass what overflows.
		WriteTimeout: 50 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("opening NFQUEUE %d: %w", cfg.QueueNum, err)
	}
	if err := nf.SetOption(netlink.NoENOBUFS, true); err != nil {
		nf.Close()
		return nil, fmt.Errorf("configuring NFQUEUE socket: %w", err)
	}
	if err := forceReadBuffer(nf.Con, netlinkBuffer); err != nil {
		nf.Close()
		return nil, fmt.Errorf("sizing the NFQUEUE socket buffer: %w", err)
	}
	b.nf = nf
	b.del = NewDelayer(cfg.Clock, cfg.MaxBacklog, b.accept)
	b.del.AckDelay = cfg.AckDelay
	switch {
	case cfg.NoRiseLimit:
		b.del.Rise = RiseLimit{}
	case cfg.RiseLimit != (RiseLimit{}):
		b.del.Rise = cfg.RiseLimit
	}
	if _, real := cfg.Clock.(clock.Real); real {
		b.del.FineSleep = rawNanosleep
	}
	rctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	if err := nf.RegisterWithErrorFunc(rctx, b.hook, b.onError); err != nil {
		cancel()
		nf.Close()
		return nil, fmt.Errorf("binding NFQUEUE %d (is another sanqos running?): %w", cfg.QueueNum, err)
	}
	b.done.Add(1)
	go func() {
		defer b.done.Done()
		b.boost()
		b.del.Run(rctx)
	}()
	return b, nil
}

func (b *Nfqueue) Name() string { return "nfqueue" }

func (b *Nfqueue) accept(ids []uint32) {
	for _, id := range ids {
		if err := b.nf.SetVerdict(id, nfqueue.NfAccept); err != nil {
			b.errs.Add(1)
		}
	}
}

func (b *Nfqueue) onError(err error) int {
	var op *netlink.OpError
	if errors.As(err, &op) && (op.Timeout() || op.Temporary()) {
		return 0
	}
	if errors.Is(err, unix.ENOBUFS) {
		return 0
	}
	b.log.Error("reading NFQUEUE", "err", err)
	return 0
}

// rtPriority is the SCHED_FIFO priority of the two packet-path threads
// (queue reader, release loop). TCP sends a loss probe when an ACK is
// late by about two RTTs; on a busy target a normal-priority thread can
// wait that long for a CPU, and every such stall is a retransmission. Both
// threads sleep between packets, and the kernel's RT throttling caps them
// anyway. 10 is low among RT priorities: kernel threads and anything the
// operator made real-time still come first.
const rtPriority = 10

// boost locks the calling goroutine to its thread for good, makes the
// thread real-time and pins it to the packet-path CPU. Both threads that
// hand verdicts to the kernel share that CPU because an accepted packet is
// transmitted from the thread that accepted it: on a veth (and any device
// without a queue) it lands in that CPU's backlog, so verdicts for one flow
// issued from two CPUs could leave in the wrong order. Failures only cost
// latency or order under load, so they are logged, not fatal.
func (b *Nfqueue) boost() {
	runtime.LockOSThread()
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0); err != nil {
		b.log.Warn("packet path runs at normal priority; delays may stretch under CPU load", "err", err)
	}
	var set unix.CPUSet
	set.Set(b.cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.log.Warn("packet path not pinned to one CPU", "cpu", b.cpu, "err", err)
	}
}

// packetCPU is the CPU the packet path is pinned to: the last one this
// process may use (CPU 0 usually takes most device interrupts).
func packetCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	cpu := 0
	for i := range 1024 { // CPU_SETSIZE, the CPUs a unix.CPUSet can hold
		if set.IsSet(i) {
			cpu = i
		}
	}
	return cpu
}

func (b *Nfqueue) hook(a nfqueue.Attribute) int {
	if !b.hookBoosted { // only the queue's reader goroutine runs hook
		b.hookBoosted = true
		b.boost()
	}
	if a.PacketID == nil {
		return 0
	}
	id := *a.PacketID
	if a.Payload == nil {
		b.accept([]uint32{id})
		return 0
	}
	total := 0
	if a.CapLen != nil {
		total = int(*a.CapLen)
	} else if len(*a.Payload) < copyRange {
		total = len(*a.Payload)
	}
	p, ok := parseIPv4TCP(*a.Payload, total)
	if !ok {
		b.errs.Add(1)
		b.accept([]uint32{id})
		return 0
	}
	delay := (*b.table.Load())[p.flow.dst].of(p.payload, b.cfg.SmallSegment)
	submit := b.del.Submit
	if p.pureAck() {
		submit = b.del.SubmitPureAck
	}
	if submit(id, p.flow, directionOf(p.payload, b.cfg.SmallSegment), p.ack, delay, b.cfg.Clock.Now()) {
		b.accept([]uint32{id})
	}
	return 0
}

// rules renders one NFQUEUE rule per group. --queue-bypass makes the
// kernel accept packets when no program is bound to the queue, so a dead
// daemon never blocks storage traffic.
func (b *Nfqueue) rules(s State) []string { return NfqueueRules(s, b.cfg.QueueNum) }

// NfqueueRules are the chain rules of the nfqueue backend for s.
func NfqueueRules(s State, queue uint16) []string {
	var out []string
	for _, g := range sortedGroups(s) {
		out = append(out, fmt.Sprintf("-A %s %s -m set --match-set %s dst -j NFQUEUE --queue-num %d --queue-bypass",
			Chain, portMatch(g.ports()), SetName(g.Name), queue))
	}
	return out
}

func (b *Nfqueue) Apply(ctx context.Context, s State) error {
	if err := Validate(s); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("backend is closed")
	}
	t := b.members.update(s, b.cfg.Clock.Now())
	// Delays first: a consumer joining finds its delay on its first packet.
	b.table.Store(&t)
	return b.program(ctx)
}

// program reconciles the kernel with the last state plus the lingering
// members, and schedules the next look at the lingering ones. b.mu held.
func (b *Nfqueue) program(ctx context.Context) error {
	now := b.cfg.Clock.Now()
	rules, sets, lingering := b.members.plan(now, b.cfg.QueueNum, func(a netip.Addr) bool {
		return b.del.Quiet(a, now, lingerQuiet)
	})
	if err := b.rec.apply(ctx, rules, sets); err != nil {
		return fmt.Errorf("programming the nfqueue data path: %w", err)
	}
	b.del.Forget(b.members.keep)
	if lingering && !b.waiting {
		b.waiting = true
		go func() {
			select {
			case <-b.cfg.Clock.After(lingerQuiet):
			case <-b.stop:
				return
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			b.waiting = false
			if b.closed {
				return
			}
			if err := b.program(context.Background()); err != nil {
				b.log.Error("removing members whose throttle ended", "err", err)
			}
		}()
	}
	return nil
}

func (b *Nfqueue) Stats() Stats {
	s := b.del.Stats()
	s.Errors = b.errs.Load()
	return s
}

// RiseStats returns how much the rise limit held delays below the
// requested ones.
func (b *Nfqueue) RiseStats() RiseStats { return b.del.RiseStats() }

// Close removes the rules and sets, then unbinds the queue (releasing
// every held packet at once).
func (b *Nfqueue) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	close(b.stop)
	err := b.rec.reset(context.Background())
	b.cancel()
	b.done.Wait()
	if cerr := b.nf.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("closing NFQUEUE: %w", cerr)
	}
	return err
}
