package nfqbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/nfq"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// Defaults of the nfqueue backend.
const (
	// DefaultQueueNum is the NFQUEUE number our rules send packets to.
	// Any 16-bit number works; the iSCSI port is easy to recognise in
	// iptables-save and unlikely to be used by anything else on a target.
	DefaultQueueNum     = 3260
	DefaultSmallSegment = plan.DefaultSmallSegment
	// DefaultMaxBacklog is the budget of packets held in user space for
	// all consumers; beyond it each consumer may hold its share, and
	// beyond twice it every packet passes at once (see packetpath). At
	// 40 MB/s of 64 KiB writes and 20 ms delay the backlog is a few
	// hundred packets, so this is far from normal use.
	DefaultMaxBacklog = 8192
	// copyRange is how much of each packet the kernel copies to us: the
	// largest IPv4 header (60) plus the largest TCP header (60).
	copyRange = 120
	// kernelQueueLen is the kernel's queue limit; it must exceed our
	// backlog's hard limit, since held packets stay in the kernel until
	// their verdict.
	// Beyond it the kernel accepts packets itself (fail-open flag).
	kernelQueueLen = 4 * DefaultMaxBacklog
	// netlinkBuffer is the receive buffer of the queue socket. When it is
	// full the kernel fails open and accepts packets itself, and those
	// overtake packets we hold: a burst at line rate must fit. Each queued
	// packet costs about 500 bytes of buffer; 16 MiB holds ~30k.
	netlinkBuffer = 16 << 20
)

// Instance is the default instance name of the nfqueue backend on queue
// number queue (0: DefaultQueueNum): "q" and the number. The facade's
// DefaultInstance uses it, so that the name has one definition.
func Instance(queue uint16) string {
	if queue == 0 {
		queue = DefaultQueueNum
	}
	return fmt.Sprintf("q%d", queue)
}

// NfqueueConfig configures the nfqueue backend. Zero values take defaults.
type NfqueueConfig struct {
	// Instance names this backend's kernel objects and lock (see owned.Owner);
	// "" means Instance(QueueNum): "q" and the queue number.
	Instance     string
	QueueNum     uint16
	SmallSegment int
	// SmallSegments overrides SmallSegment per target port (see
	// DefaultSmallSegments): the split is the protocol's.
	SmallSegments map[uint16]int
	MaxBacklog    int
	Firewall      owned.Firewall // default: iptables on this machine
	// Firewall6 programs the IPv6 half; default: ip6tables beside
	// Firewall when that is an *Iptables, else none (IPv6 consumers are
	// then refused).
	Firewall6 owned.Firewall
	Sets      owned.Sets // default: ipsets over netlink
	NetNS     int        // fd of the network namespace for the queue; 0: current
	Logger    *slog.Logger
	// RiseLimit bounds how fast a flow's delay rises (zero: the default,
	// DefaultRiseLimit); NoRiseLimit turns it off, which makes senders
	// send spurious loss probes whenever a delay jumps up (for tests and
	// measurements that show why the limit exists).
	RiseLimit   packetpath.RiseLimit
	NoRiseLimit bool
	// AckDelay holds pure ACKs in the write direction as well. Off (the
	// default), the write direction holds only small data-bearing
	// segments (0 < payload ≤ SmallSegment: R2T, SCSI Response), which
	// clock a synchronous iSCSI writer, and its sender never sees our
	// delay in its RTT samples, so it sends no spurious loss probes (see
	// packetpath.Delayer.SubmitPureAck). On, pure ACKs are held too, in order with
	// everything else: needed to slow bulk TCP streams, which the ACK
	// clock paces.
	AckDelay bool
	// NoStandby runs the packet path without a standby thread (see
	// standby), for measurements that show what the standby does.
	NoStandby bool
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
// safe because they carry no data (see packetpath.Delayer.SubmitPureAck).
//
// One real-time thread (loop) does all the packet work: it waits in
// ppoll(2) for the queue socket, an eventfd and the next release time,
// reads packets, hands them to the Delayer and gives verdicts. Nothing on
// that path waits for another thread of the process: the kernel wakes it
// directly, and the control loop's calls (Apply, Stats) are run on it as
// commands instead of taking a lock it also needs (see onLoop). While
// that thread's CPU is stalled, a standby thread on another CPU does its
// work (see standby).
//
// The parts live in files of their own: this one has the lifecycle and
// the rules; stats.go the counters; applied.go when they need not be
// given again; members.go and classes.go who is queued and the delay
// table; package packetpath the delayer and each consumer's share of
// the backlog; packetloop.go the packet thread; standby.go the standby;
// commands.go the command channel; rt_linux.go the threads' real-time
// placement; pathio.go the seams (pathClock, queueSocket) through which
// unit tests drive the packet path with a fake clock and queue.
type Nfqueue struct {
	cfg      NfqueueConfig
	lock     *owned.Lock // held until Close has removed everything
	rec      *owned.Reconciler
	rec6     *owned.Reconciler // the IPv6 half; nil: IPv6 consumers are refused
	table    atomic.Pointer[pathTable]
	del      *packetpath.Delayer
	sock     queueSocket
	clk      pathClock
	place    func(cpu int, name string, rt bool) (undo func()) // makes the calling thread one of the packet path's (see boost)
	proc     string                                            // the /proc root the packet path reads
	wake     int                                               // eventfd: a command is waiting, or stop
	log      *slog.Logger
	onPacket func(nfq.Packet)
	atOnce   []uint32 // packets read this round that need no delay

	mu      sync.Mutex
	members members
	applied programmed // what the reconcilers were last given, successfully
	// splitClean: split refused nothing of the last state.
	splitClean bool
	waiting    bool // a re-sync for lingering members is scheduled
	stop       chan struct{}
	closed     bool

	cmdMu    sync.Mutex             // one command at a time
	cmd      atomic.Pointer[func()] // the command waiting for the packet thread
	ran      atomic.Bool            // the command ran (for the memory model; done says when)
	done     int                    // eventfd (blocking): the command ran
	ended    atomic.Bool            // the packet thread takes no more commands
	stopping atomic.Bool
	loopDone chan struct{}

	errs      atomic.Uint64 // verdict, read and parse failures
	stalls    stalls        // the packet thread's own; path lock held
	lastLog   time.Time     // of the packet path's last error log; path lock held
	cpu       int           // the packet thread's CPU
	rt        bool          // the packet thread is real-time
	unreserve []func()      // give back the Ps reserved for the packet path's threads

	// path is held by the thread that runs the packet path: the packet
	// thread while it is not waiting, or the standby while it has taken
	// over. Only ever TryLock'ed: no thread of the path waits for it.
	path        sync.Mutex
	beat        atomic.Uint64 // the packet thread's wake-ups
	alive       atomic.Int64  // UnixNano of the packet path's last round, by either thread (see Healthy)
	back        atomic.Bool   // the packet thread wants the path back
	declined    atomic.Uint64 // standby looks that found the packet CPU's backlog busy
	active      atomic.Bool   // rules are installed: packets may come
	idle        *idler        // parks the packet thread while no rule is installed; nil: never (the unit tests' fake path)
	standbyCPU  int           // -1: no standby
	standbyDone chan struct{}
}

// NewNfqueue removes what a crashed run left, binds the queue and starts
// the packet thread. The rules come with the first Apply.
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
	if cfg.MaxBacklog < 0 || packetpath.HardBacklogFactor*cfg.MaxBacklog >= kernelQueueLen {
		// Beyond the kernel's queue limit the kernel accepts packets
		// itself, and those would overtake the ones we hold.
		return nil, fmt.Errorf("backlog budget %d packets: want 1 to %d (its hard limit, %d times it, must stay under the kernel's queue of %d)",
			cfg.MaxBacklog, (kernelQueueLen-1)/packetpath.HardBacklogFactor, packetpath.HardBacklogFactor, kernelQueueLen)
	}
	if cfg.Firewall == nil {
		cfg.Firewall = &owned.Iptables{Run: owned.ExecRunner{}}
	}
	if ipt, ok := cfg.Firewall.(*owned.Iptables); ok && cfg.Firewall6 == nil && !ipt.V6 {
		cfg.Firewall6 = &owned.Iptables{Run: ipt.Run, V6: true}
	}
	if cfg.Sets == nil {
		cfg.Sets = owned.Ipsets{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = Instance(cfg.QueueNum)
	}
	if err := owned.CheckInstance(cfg.Instance); err != nil {
		return nil, err
	}
	if err := plan.ValidateSmallSegments(cfg.SmallSegments); err != nil {
		return nil, err
	}
	lock, err := owned.LockInstance(cfg.NetNS, cfg.Instance)
	if err != nil {
		return nil, fmt.Errorf("%w; stop it first, or give this one another queue (--queue-num)", err)
	}
	b, err := newNfqueue(ctx, cfg, lock)
	if err != nil {
		lock.Release()
		return nil, err
	}
	return b, nil
}

func newNfqueue(ctx context.Context, cfg NfqueueConfig, lock *owned.Lock) (*Nfqueue, error) {
	b := &Nfqueue{cfg: cfg, lock: lock, rec: owned.NewOwnedReconciler(cfg.Firewall, cfg.Sets, cfg.Instance, cfg.NetNS),
		log:  cfg.Logger.With("backend", "nfqueue", "instance", cfg.Instance),
		stop: make(chan struct{}), loopDone: make(chan struct{}), standbyDone: make(chan struct{})}
	b.cpu, b.standbyCPU = pathCPUs()
	// Real-time only with another CPU beside it: see rtPriority.
	b.rt = b.standbyCPU >= 0
	if cfg.NoStandby {
		b.standbyCPU = -1
	}
	if err := b.rec.Reset(ctx); err != nil {
		return nil, fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	if err := b.rec.SweepDead(ctx); err != nil {
		b.log.Warn("some leftovers of dead sanqos instances stay", "err", err)
	}
	if cfg.Firewall6 != nil {
		b.rec6 = owned.NewV6Reconciler(cfg.Firewall6, cfg.Sets, cfg.Instance, cfg.NetNS)
		if _, err := cfg.Firewall6.Chains(ctx); err != nil {
			b.log.Warn("ip6tables does not work here: IPv6 consumers will be refused", "err", err)
			b.rec6 = nil
		} else if err := b.rec6.Reset(ctx); err != nil {
			return nil, fmt.Errorf("removing leftovers of an earlier run (IPv6): %w", err)
		} else if err := b.rec6.SweepDead(ctx); err != nil {
			b.log.Warn("some leftovers of dead sanqos instances stay (IPv6)", "err", err)
		}
	}
	sock, err := nfq.Open(nfq.Config{
		Queue:       cfg.QueueNum,
		CopyRange:   copyRange,
		MaxQueueLen: kernelQueueLen,
		// Fail open: when our queue is full the kernel accepts instead of
		// dropping; GSO: take super-packets whole instead of having the
		// kernel segment them for us.
		Flags:  nfq.FlagFailOpen | nfq.FlagGSO,
		RcvBuf: netlinkBuffer,
		NetNS:  cfg.NetNS,
	})
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("creating the packet thread's eventfd: %w", err)
	}
	done, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		sock.Close()
		unix.Close(wake)
		return nil, fmt.Errorf("creating the packet thread's eventfd: %w", err)
	}
	b.place = b.boost
	b.initPath(kernelQueue{sock}, wake, done, kernelClock{}, "/proc")
	b.idle = newIdler()
	b.unreserve = append(b.unreserve, reserveProc())
	if !b.rt {
		b.log.Info("one CPU only: the packet thread runs at the daemon's raised normal priority, not real-time; delays may stretch under CPU load")
	}
	if err := raiseOtherThreads(b.proc); err != nil {
		b.log.Warn("the daemon's other threads keep their priority; the packet thread may wait for them under CPU load", "err", err)
	}
	go b.loop()
	if b.standbyCPU >= 0 {
		b.unreserve = append(b.unreserve, reserveProc())
		go b.standby()
	} else {
		close(b.standbyDone)
		if !cfg.NoStandby {
			b.log.Info("one CPU only: no standby for the packet thread; a stall of that CPU delays held packets")
		}
	}
	return b, nil
}

// initPath gives the packet path its socket, eventfds (wake: a command
// or stop waits; done: the command ran), clock and /proc root, and makes
// its delayer. The backend gives it the kernel's, unit tests fakes.
func (b *Nfqueue) initPath(sock queueSocket, wake, done int, clk pathClock, proc string) {
	b.sock, b.wake, b.done, b.clk, b.proc = sock, wake, done, clk, proc
	b.onPacket = b.handle
	b.members.small, b.members.def = b.cfg.SmallSegments, b.cfg.SmallSegment
	b.table.Store(tableOf(nil))
	b.del = packetpath.NewDelayer(clk, b.cfg.MaxBacklog, b.release)
	b.del.AckDelay = b.cfg.AckDelay
	b.del.Warn = b.warnHog
	switch {
	case b.cfg.NoRiseLimit:
		b.del.Rise = packetpath.RiseLimit{}
	case b.cfg.RiseLimit != (packetpath.RiseLimit{}):
		b.del.Rise = b.cfg.RiseLimit
	}
	b.alive.Store(clk.Now().UnixNano())
}

func (b *Nfqueue) Name() string { return "nfqueue" }

// heartbeat is the longest the packet thread waits without going round
// its loop: a quarter of HealthyWithin, so that a live thread is never
// reported stuck, and 4 wake-ups a second cost nothing.
const heartbeat = HealthyWithin / 4

// HealthyWithin is how recently the packet path must have gone round its
// loop for Healthy to pass.
const HealthyWithin = time.Second

// Healthy reports whether the packet path is alive at now: the packet
// thread (or the standby in its place) went round its loop within
// HealthyWithin. It proves what a watchdog must know: held packets are
// being released. A daemon that feeds a watchdog only while Healthy
// passes is restarted when its packet path is stuck, and the kernel then
// lets packets pass (--queue-bypass).
func (b *Nfqueue) Healthy(now time.Time) error {
	if b.stopping.Load() {
		return errors.New("the nfqueue backend is closed")
	}
	last := time.Unix(0, b.alive.Load())
	if age := now.Sub(last); age > HealthyWithin {
		return fmt.Errorf("the nfqueue packet path has not run for %v (limit %v); held packets are not being released", age.Round(time.Millisecond), HealthyWithin)
	}
	return nil
}

// rules renders one NFQUEUE rule per group. --queue-bypass makes the
// kernel accept packets when no program is bound to the queue, so a dead
// daemon never blocks storage traffic.
func (b *Nfqueue) rules(s plan.State) []string { return NfqueueRules(s, b.cfg.QueueNum) }

// Programs is the part of s this backend puts in the kernel: IPv6
// consumers only where ip6tables works. throttle.InForce reports it.
func (b *Nfqueue) Programs(s plan.State) plan.State {
	s, _ = plan.SplitV6(s, b.rec6 != nil)
	return s
}

// NfqueueRules are the chain rules of the nfqueue backend for s.
func NfqueueRules(s plan.State, queue uint16) []string {
	var out []string
	for _, g := range plan.SortedGroups(s) {
		out = append(out, fmt.Sprintf("-A %s %s -m set --match-set %s dst -j NFQUEUE --queue-num %d --queue-bypass",
			owned.Chain, plan.PortMatch(g.TargetPorts()), plan.SetName(g.Name), queue))
	}
	return out
}

func (b *Nfqueue) Apply(ctx context.Context, s plan.State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("backend is closed")
	}
	// What cannot be programmed is left out, one consumer or group at a
	// time, and reported; everything else is controlled as usual. A state
	// with the members of the last one, all of which could be
	// programmed, has nothing to leave out: no need to look at each
	// member again.
	var refused *plan.Refused
	if !b.splitClean || !b.members.sameMembers(s) {
		s, refused = plan.SplitV6(s, b.rec6 != nil)
		b.splitClean = refused == nil
	}
	t := b.members.apply(s, b.clk.Now())
	// Delays first: a consumer joining finds its delay on its first packet.
	b.table.Store(t)
	err := b.program(ctx)
	if refused != nil {
		return errors.Join(err, refused)
	}
	return err
}

// program reconciles the kernel with the last state plus the lingering
// members, and schedules the next look at the lingering ones. b.mu held.
func (b *Nfqueue) program(ctx context.Context) error {
	now := b.clk.Now()
	var rules []string
	var sets map[string][]netip.Addr
	var lingering bool
	b.onLoop(func() {
		rules, sets, lingering = b.members.plan(now, b.cfg.QueueNum, func(a netip.Addr) bool {
			return b.del.Quiet(a, now, lingerQuiet)
		})
	})
	if !b.applied.same(rules, sets) || !b.rec.Clean() || b.rec6 != nil && !b.rec6.Clean() {
		b.applied = programmed{}
		rules4, sets4, rules6, sets6 := byFamily(rules, sets)
		err4 := b.rec.Apply(ctx, rules4, sets4)
		var err6 error
		if b.rec6 != nil {
			err6 = b.rec6.Apply(ctx, rules6, sets6)
		}
		if err := errors.Join(err4, err6); err != nil {
			return fmt.Errorf("programming the nfqueue data path: %w", err)
		}
		b.applied = programmed{rules, sets}
	}
	if b.active.Store(len(rules) > 0); len(rules) > 0 {
		b.idle.wake() // the first packets come now
	}
	// Only when an address stopped being kept: Forget walks every
	// consumer the packet path knows, and a new delay, which comes at
	// every tick while a resource is over its threshold, forgets nothing.
	if b.members.forgetDue() {
		b.onLoop(func() { b.del.Forget(func(a netip.Addr) bool { return b.members.keep(a, now) }) })
	}
	if lingering && !b.waiting {
		b.waiting = true
		go func() {
			select {
			case <-time.After(lingerQuiet):
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

// Close removes the rules and sets, releases every held packet at once,
// then unbinds the queue.
func (b *Nfqueue) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	close(b.stop)
	// Rules first: nothing new enters the queue while the packet thread
	// lets go of what it holds.
	err := b.rec.Reset(context.Background())
	if b.rec6 != nil {
		err = errors.Join(err, b.rec6.Reset(context.Background()))
	}
	b.stopping.Store(true)
	b.kick()
	<-b.loopDone
	<-b.standbyDone
	if cerr := b.sock.Close(); cerr != nil && err == nil {
		err = cerr
	}
	unix.Close(b.wake)
	unix.Close(b.done)
	for _, give := range b.unreserve {
		give()
	}
	b.lock.Release()
	return err
}
