package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/nfq"
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

// NfqueueConfig configures the nfqueue backend. Zero values take defaults.
type NfqueueConfig struct {
	// Instance names this backend's kernel objects and lock (see owner);
	// "" means DefaultInstance: "q" and the queue number.
	Instance     string
	QueueNum     uint16
	SmallSegment int
	MaxBacklog   int
	Firewall     Firewall // default: iptables on this machine
	// Firewall6 programs the IPv6 half; default: ip6tables beside
	// Firewall when that is an *Iptables, else none (IPv6 consumers are
	// then refused).
	Firewall6 Firewall
	Sets      Sets // default: ipsets over netlink
	NetNS     int  // fd of the network namespace for the queue; 0: current
	Logger    *slog.Logger
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
	// NoStandby runs the packet path without a standby thread (see
	// standby), for measurements that show what the standby does.
	NoStandby bool
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
//
// One real-time thread (loop) does all the packet work: it waits in
// ppoll(2) for the queue socket, an eventfd and the next release time,
// reads packets, hands them to the Delayer and gives verdicts. Nothing on
// that path waits for another thread of the process: the kernel wakes it
// directly, and the control loop's calls (Apply, Stats) are run on it as
// commands instead of taking a lock it also needs (see onLoop). While
// that thread's CPU is stalled, a standby thread on another CPU does its
// work (see standby).
type Nfqueue struct {
	cfg      NfqueueConfig
	lock     *instanceLock // held until Close has removed everything
	rec      *reconciler
	rec6     *reconciler // the IPv6 half; nil: IPv6 consumers are refused
	table    atomic.Pointer[delays]
	del      *Delayer
	sock     *nfq.Socket
	wake     int // eventfd: a command is waiting, or stop
	log      *slog.Logger
	onPacket func(nfq.Packet)
	atOnce   []uint32 // packets read this round that need no delay

	mu      sync.Mutex
	members members
	waiting bool // a re-sync for lingering members is scheduled
	stop    chan struct{}
	closed  bool

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
	if cfg.Firewall == nil {
		cfg.Firewall = &Iptables{Run: ExecRunner{}}
	}
	if ipt, ok := cfg.Firewall.(*Iptables); ok && cfg.Firewall6 == nil && !ipt.V6 {
		cfg.Firewall6 = &Iptables{Run: ipt.Run, V6: true}
	}
	if cfg.Sets == nil {
		cfg.Sets = Ipsets{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance(Options{QueueNum: cfg.QueueNum})
	}
	if err := CheckInstance(cfg.Instance); err != nil {
		return nil, err
	}
	lock, err := lockInstance(cfg.NetNS, cfg.Instance)
	if err != nil {
		return nil, fmt.Errorf("%w; stop it first, or give this one another queue (--queue-num)", err)
	}
	b, err := newNfqueue(ctx, cfg, lock)
	if err != nil {
		lock.release()
		return nil, err
	}
	return b, nil
}

func newNfqueue(ctx context.Context, cfg NfqueueConfig, lock *instanceLock) (*Nfqueue, error) {
	b := &Nfqueue{cfg: cfg, lock: lock, rec: newOwnedReconciler(cfg.Firewall, cfg.Sets, cfg.Instance, cfg.NetNS),
		log:  cfg.Logger.With("backend", "nfqueue", "instance", cfg.Instance),
		stop: make(chan struct{}), loopDone: make(chan struct{}), standbyDone: make(chan struct{})}
	b.cpu, b.standbyCPU = pathCPUs()
	if cfg.NoStandby {
		b.standbyCPU = -1
	}
	b.onPacket = b.handle
	b.table.Store(&delays{})
	if err := b.rec.reset(ctx); err != nil {
		return nil, fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	if err := b.rec.sweepDead(ctx); err != nil {
		b.log.Warn("some leftovers of dead sanqos instances stay", "err", err)
	}
	if cfg.Firewall6 != nil {
		b.rec6 = newV6Reconciler(cfg.Firewall6, cfg.Sets, cfg.Instance, cfg.NetNS)
		if _, err := cfg.Firewall6.Chains(ctx); err != nil {
			b.log.Warn("ip6tables does not work here: IPv6 consumers will be refused", "err", err)
			b.rec6 = nil
		} else if err := b.rec6.reset(ctx); err != nil {
			return nil, fmt.Errorf("removing leftovers of an earlier run (IPv6): %w", err)
		} else if err := b.rec6.sweepDead(ctx); err != nil {
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
	b.sock, b.wake, b.done = sock, wake, done
	b.del = NewDelayer(clock.Real{}, cfg.MaxBacklog, b.release)
	b.del.AckDelay = cfg.AckDelay
	switch {
	case cfg.NoRiseLimit:
		b.del.Rise = RiseLimit{}
	case cfg.RiseLimit != (RiseLimit{}):
		b.del.Rise = cfg.RiseLimit
	}
	b.alive.Store(time.Now().UnixNano())
	b.unreserve = append(b.unreserve, reserveProc())
	if err := raiseOtherThreads(); err != nil {
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

// reserveProc gives the Go scheduler one P (the right to run Go code)
// more than before, for as long as a packet thread runs; release gives it
// back. The packet thread keeps its P even while it waits (see
// yieldEvery), so without one more the daemon's ordinary goroutines, and
// a garbage collection, would have a CPU's worth less than the machine
// has.
var procs struct {
	sync.Mutex
	base, threads int
}

func reserveProc() (release func()) {
	procs.Lock()
	defer procs.Unlock()
	if procs.threads == 0 {
		procs.base = runtime.GOMAXPROCS(0)
	}
	procs.threads++
	runtime.GOMAXPROCS(procs.base + procs.threads)
	return func() {
		procs.Lock()
		defer procs.Unlock()
		procs.threads--
		runtime.GOMAXPROCS(procs.base + procs.threads)
	}
}

func (b *Nfqueue) Name() string { return "nfqueue" }

// accept gives the kernel the verdicts for released packets.
func (b *Nfqueue) accept(ids []uint32) {
	if err := b.sock.Accept(ids...); err != nil {
		b.errs.Add(uint64(len(ids)))
		b.loopError(err)
	}
}

// release is the delayer's release. The packets of this round that
// are to be accepted at once (atOnce) go first: they came before, and
// when a full backlog makes the delayer let a flow's held packets go in
// the middle of a round (see Delayer.Submit), one of that flow's may be
// among them.
func (b *Nfqueue) release(ids []uint32) {
	b.flushAtOnce()
	b.accept(ids)
}

// loopError logs a failure of the packet thread at most every 10 s; the
// count is in the data-path counters.
func (b *Nfqueue) loopError(err error) {
	if now := time.Now(); now.Sub(b.lastLog) >= 10*time.Second {
		b.lastLog = now
		b.log.Error("packet path", "err", err)
	}
}

// rtPriority is the SCHED_FIFO priority of the packet thread. TCP sends a
// loss probe when an ACK is late by about two RTTs; on a busy target a
// normal-priority thread can wait that long for a CPU, and every such
// stall is a retransmission. The thread sleeps between packets, and the
// kernel's RT throttling caps it anyway. 10 is low among RT priorities:
// kernel threads and anything the operator made real-time still come
// first.
const rtPriority = 10

// boost locks the calling goroutine to its thread for good, makes the
// thread real-time and pins it to cpu. It stays on one CPU because an
// accepted packet is transmitted from the thread that accepted it: on a
// veth (and any device without a queue) it lands in that CPU's backlog,
// so verdicts for one flow issued from two CPUs could leave in the wrong
// order (the standby therefore waits for the packet CPU's backlog to
// empty before it takes over). Failures only cost latency or order under
// load, so they are logged, not fatal.
func (b *Nfqueue) boost(cpu int) {
	runtime.LockOSThread()
	if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0); err != nil {
		b.log.Warn("packet path runs at normal priority; delays may stretch under CPU load", "err", err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.log.Warn("packet path not pinned to one CPU", "cpu", cpu, "err", err)
	}
}

// otherThreadsNice is the nice value the process's other threads get. The
// packet thread cannot avoid them entirely: every 10–20 ms without a quiet
// moment, the Go scheduler preempts it, and it runs again only once one of
// them hands its P back. Under EEVDF a waking nice −10 thread (weight
// about 9.3 × nice 0) takes a CPU from tgtd or the initiators' work at
// once, so that hand-back costs microseconds, not the milliseconds of a
// nice 0 thread queued behind them. The daemon's own work is a few
// percent of a CPU; it cannot crowd out the target's.
const otherThreadsNice = -10

// raiseOtherThreads sets otherThreadsNice on every thread of the process
// that has a lower priority. New threads inherit it from the threads that
// create them.
func raiseOtherThreads() error {
	tids, err := processThreads()
	if err != nil {
		return err
	}
	var first error
	for _, tid := range tids {
		// The raw system call answers 20 − nice.
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil || 20-prio <= otherThreadsNice {
			continue // gone, or already at least as high
		}
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, otherThreadsNice); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// processThreads lists the thread ids of this process.
func processThreads() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	var tids []int
	for _, e := range tasks {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// pathCPUs are the CPUs of the packet path: the packet thread's, the last
// one this process may use (CPU 0 usually takes most device interrupts),
// and the standby's, the first other one (-1 when there is none).
func pathCPUs() (packet, standby int) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, -1
	}
	packet, standby = 0, -1
	for i := range 1024 { // CPU_SETSIZE, the CPUs a unix.CPUSet can hold
		if set.IsSet(i) {
			packet = i
		}
	}
	for i := range packet {
		if set.IsSet(i) {
			return packet, i
		}
	}
	return packet, -1
}

// maxReadsPerRound bounds the datagrams read between two looks at the
// release heap, so that a burst of arrivals cannot hold releases up: 256
// reads take well under a millisecond.
const maxReadsPerRound = 256

// loop is the packet thread. It ends when Close sets stopping, after
// releasing everything it holds.
//
// It holds the path lock (b.path) while it works and lets go of it while
// it waits in ppoll, so that the standby (see standby) can take the path
// over when this thread does not come back from a wait in time. It never
// blocks on that lock: when the standby has it, the thread asks for it
// back (b.back) and looks again shortly.
func (b *Nfqueue) loop() {
	defer close(b.loopDone)
	b.boost(b.cpu)
	t := b.newPathThread()
	for !b.stopping.Load() {
		yield := t.yield()
		if !b.path.TryLock() {
			b.back.Store(true)
			rawSleep(backOff)
			continue
		}
		if yield > 0 {
			b.stalls.yields.add(yield)
		}
		at, holding := b.del.next()
		if holding && !at.After(time.Now()) {
			b.del.ReleaseDue(time.Now())
			b.path.Unlock()
			continue
		}
		b.path.Unlock()
		err := t.wait(at, holding)
		b.beat.Add(1)
		b.alive.Store(time.Now().UnixNano())
		if !b.path.TryLock() {
			continue // the standby runs the path and handles what woke us
		}
		if err != nil {
			b.errs.Add(1)
			b.loopError(fmt.Errorf("waiting for packets: %w", err))
			b.path.Unlock()
			pause()
			continue
		}
		if holding && t.timedOut() && !time.Now().Before(at) {
			b.stalls.wakes.add(time.Since(at))
		}
		t.serve()
		b.path.Unlock()
	}
	// On the way out we fail open: what we hold first, then what is
	// still waiting in the socket, in the order it came. Close removed
	// the rules before, so the socket runs dry. The standby gives the
	// path back once it sees stopping.
	for !b.path.TryLock() {
		rawSleep(backOff)
	}
	b.del.releaseAll()
	b.drain()
	b.endCmds()
}

// drainQuiet is how long the socket must stay empty before the packet
// thread lets the queue close: the kernel drops whatever is still queued
// when it does (see Close), and a packet that passed the rule on another
// CPU just before the rule went may reach the socket a moment later.
const drainQuiet = 2 * time.Millisecond

// drain accepts, in the order they come, the packets still in the socket,
// until it has been empty for drainQuiet (at most a second and 65,536
// reads: the rules are gone, so the socket runs dry).
func (b *Nfqueue) drain() {
	fds := []unix.PollFd{{Fd: int32(b.sock.Fd()), Events: unix.POLLIN}}
	quiet := unix.NsecToTimespec(drainQuiet.Nanoseconds())
	deadline := time.Now().Add(time.Second)
	for n := 0; n < 1<<16 && time.Now().Before(deadline); {
		more, err := b.sock.Read(func(p nfq.Packet) { b.atOnce = append(b.atOnce, p.ID) })
		n++
		if err != nil {
			break
		}
		if more {
			continue
		}
		b.flushAtOnce()
		fds[0].Revents = 0
		if rawPpoll(fds, &quiet) != nil || fds[0].Revents == 0 {
			break
		}
	}
	b.flushAtOnce()
}

// pathThread is what a thread that runs the packet path (the packet
// thread, or the standby while it has taken over) keeps for itself.
type pathThread struct {
	b       *Nfqueue
	fds     []unix.PollFd
	ts      unix.Timespec
	yielded time.Time
}

func (b *Nfqueue) newPathThread() *pathThread {
	return &pathThread{b: b, yielded: time.Now(),
		fds: []unix.PollFd{{Fd: int32(b.sock.Fd()), Events: unix.POLLIN}, {Fd: int32(b.wake), Events: unix.POLLIN}}}
}

// yield gives the Go scheduler a turn every yieldEvery, at a moment when
// no packet is due within yieldRoom, and returns how long that took (0:
// it did not yield).
func (t *pathThread) yield() time.Duration {
	now := time.Now()
	if now.Sub(t.yielded) < yieldEvery {
		return 0
	}
	if at, holding := t.b.del.next(); holding && at.Sub(now) < yieldRoom {
		return 0
	}
	runtime.Gosched()
	t.yielded = time.Now()
	return t.yielded.Sub(now)
}

// wait waits in ppoll(2) for packets, a command, or (holding) the release
// time at.
func (t *pathThread) wait(at time.Time, holding bool) error {
	// A real-time thread's timeouts have no timer slack: ppoll wakes
	// within microseconds of the release time. With nothing held it
	// still wakes every heartbeat, so that Healthy can tell a live
	// packet thread from a stuck one.
	wait := heartbeat
	if holding {
		wait = min(max(time.Until(at), 0), heartbeat)
	}
	t.ts = unix.NsecToTimespec(wait.Nanoseconds())
	timeout := &t.ts
	t.fds[0].Revents, t.fds[1].Revents = 0, 0
	if err := rawPpoll(t.fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	return nil
}

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

// timedOut reports whether the last wait ended by its timeout.
func (t *pathThread) timedOut() bool { return t.fds[0].Revents == 0 && t.fds[1].Revents == 0 }

// serve handles what ended the last wait: a command, packets, then the
// releases that are due. The path lock is held.
func (t *pathThread) serve() {
	b := t.b
	if t.fds[1].Revents != 0 {
		rawEventfd(unix.SYS_READ, b.wake)
		b.runCmd()
	}
	if r := t.fds[0].Revents; r&(unix.POLLERR|unix.POLLNVAL) != 0 {
		b.errs.Add(1)
		b.loopError(fmt.Errorf("NFQUEUE socket: poll events %#x", r))
		pause()
	} else if r != 0 {
		b.receive()
	}
	b.del.ReleaseDue(time.Now())
}

// The packet thread waits in raw system calls (rawPpoll; the socket's
// reads and writes are raw too) and so keeps its P, the right to run Go
// code, while it waits: it never depends on another thread to give one
// back. The Go scheduler sees a goroutine that never yields, though, and
// after 10–20 ms preempts it, which parks the thread until an ordinary
// thread hands its P back — on a busy target a wait of milliseconds. So
// the thread yields by itself, every yieldEvery, at a moment when no
// packet is due within yieldRoom; the scheduler then never needs to.
const (
	yieldEvery = 5 * time.Millisecond
	yieldRoom  = 2 * time.Millisecond
)

// stalls keeps the packet thread's recent stalls of its own, apart from
// the delay errors they cause: how long its yields to the Go scheduler
// took (another thread must hand its P back), how late the kernel woke it
// for a release (the hypervisor took the CPU, or something of a higher
// class ran), and how long the standby ran the path for it. The path lock
// guards it; Stats reads it under that lock too.
type stalls struct{ yields, wakes, takeovers recent }

// recent holds the last 64 durations added.
type recent struct {
	d [64]time.Duration
	n int // durations ever added
}

func (r *recent) add(d time.Duration) { r.d[r.n%len(r.d)] = d; r.n++ }
func (r *recent) max() time.Duration  { return slices.Max(r.d[:]) }

// rawPpoll is ppoll(2) without telling the Go scheduler; see yieldEvery.
func rawPpoll(fds []unix.PollFd, timeout *unix.Timespec) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(timeout)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// rawEventfd reads (clears) or writes (signals) an eventfd without telling
// the Go scheduler, like rawPpoll.
func rawEventfd(op uintptr, fd int) {
	v := uint64(1)
	unix.RawSyscall(op, uintptr(fd), uintptr(unsafe.Pointer(&v)), 8)
}

// pause keeps a failing packet thread from spinning at real-time
// priority.
func pause() { time.Sleep(10 * time.Millisecond) }

// receive reads what the queue holds, up to maxReadsPerRound datagrams.
func (b *Nfqueue) receive() {
	for range maxReadsPerRound {
		more, err := b.sock.Read(b.onPacket)
		if err != nil {
			b.errs.Add(1)
			b.loopError(err)
			break
		}
		if !more {
			break
		}
	}
	b.flushAtOnce()
}

// flushAtOnce accepts the packets of this round that need no delay. They
// wait for the end of the round (a fraction of a millisecond) so that one
// write carries them all; none of them can be overtaken meanwhile, since
// a packet of the same flow arriving later is either held or also here,
// after it.
func (b *Nfqueue) flushAtOnce() {
	if len(b.atOnce) > 0 {
		b.accept(b.atOnce)
		b.atOnce = b.atOnce[:0]
	}
}

// handle classifies one queued packet and submits it to the delayer.
func (b *Nfqueue) handle(pk nfq.Packet) {
	total := int(pk.CapLen)
	if total == 0 && len(pk.Payload) < copyRange {
		total = len(pk.Payload)
	}
	p, ok := parseTCP(pk.Payload, total)
	if !ok {
		b.errs.Add(1)
		b.atOnce = append(b.atOnce, pk.ID)
		return
	}
	delay := (*b.table.Load())[p.flow.dst].of(p.payload, b.cfg.SmallSegment)
	submit := b.del.Submit
	if p.pureAck() {
		submit = b.del.SubmitPureAck
	}
	if submit(pk.ID, p.flow, directionOf(p.payload, b.cfg.SmallSegment), p.ack, delay, time.Now()) {
		b.atOnce = append(b.atOnce, pk.ID)
	}
}

// onLoop runs f on the packet thread and waits for it (once the thread
// has ended, f runs here). The control loop's work on the delayer goes
// this way: were it to take the delayer's lock itself, a normal-priority
// goroutine preempted while holding it would stall the real-time thread.
// Both directions are eventfds, not channels: the packet thread never
// makes a goroutine runnable, which would queue it on the thread's P and
// invite the scheduler to take that P away while the thread waits.
func (b *Nfqueue) onLoop(f func()) {
	b.cmdMu.Lock()
	defer b.cmdMu.Unlock()
	if b.ended.Load() {
		f()
		return
	}
	b.ran.Store(false)
	b.cmd.Store(&f)
	b.kick()
	var buf [8]byte
	for {
		// A blocking read: the kernel wakes this thread when the
		// command ran.
		if _, err := unix.Read(b.done, buf[:]); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	// What f wrote is ours to read: the eventfd said so, and this load
	// of what the packet thread stored after f says so to Go's memory
	// model (and the race detector).
	if !b.ran.Load() {
		panic("throttle: packet thread answered a command it did not run")
	}
}

// kick wakes the packet thread.
func (b *Nfqueue) kick() {
	one := [8]byte{1}
	_, _ = unix.Write(b.wake, one[:])
}

// runCmd runs the command waiting for the packet thread, if any.
func (b *Nfqueue) runCmd() {
	if f := b.cmd.Swap(nil); f != nil {
		(*f)()
		b.ran.Store(true)
		rawEventfd(unix.SYS_WRITE, b.done)
	}
}

// endCmds stops taking commands. A caller holds cmdMu from queuing its
// command until it ran, so running what waits while trying to take it
// lets every caller through.
func (b *Nfqueue) endCmds() {
	for !b.cmdMu.TryLock() {
		b.runCmd()
		time.Sleep(50 * time.Microsecond)
	}
	b.runCmd()
	b.ended.Store(true)
	b.cmdMu.Unlock()
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
	if err := validateShape(s); err != nil {
		return err
	}
	// What cannot be programmed is left out, one consumer or group at a
	// time, and reported; everything else is controlled as usual.
	s, refused := split(s, b.rec6 != nil)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errors.New("backend is closed")
	}
	t := b.members.update(s, time.Now())
	// Delays first: a consumer joining finds its delay on its first packet.
	b.table.Store(&t)
	err := b.program(ctx)
	if refused != nil {
		return errors.Join(err, refused)
	}
	return err
}

// program reconciles the kernel with the last state plus the lingering
// members, and schedules the next look at the lingering ones. b.mu held.
func (b *Nfqueue) program(ctx context.Context) error {
	now := time.Now()
	var rules []string
	var sets map[string][]netip.Addr
	var lingering bool
	b.onLoop(func() {
		rules, sets, lingering = b.members.plan(now, b.cfg.QueueNum, func(a netip.Addr) bool {
			return b.del.Quiet(a, now, lingerQuiet)
		})
	})
	rules4, sets4, rules6, sets6 := byFamily(rules, sets)
	err4 := b.rec.apply(ctx, rules4, sets4)
	var err6 error
	if b.rec6 != nil {
		err6 = b.rec6.apply(ctx, rules6, sets6)
	}
	if err := errors.Join(err4, err6); err != nil {
		return fmt.Errorf("programming the nfqueue data path: %w", err)
	}
	b.active.Store(len(rules) > 0)
	b.onLoop(func() { b.del.Forget(b.members.keep) })
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

func (b *Nfqueue) Stats() Stats {
	var s Stats
	b.onLoop(func() {
		s = b.del.Stats()
		s.Errors = b.errs.Load() + b.sock.Errors
		s.YieldMax, s.WakeLateMax = b.stalls.yields.max(), b.stalls.wakes.max()
		s.Takeovers, s.TakeoverMax = uint64(b.stalls.takeovers.n), b.stalls.takeovers.max()
		s.TakeoversDeclined = b.declined.Load()
	})
	return s
}

// RiseStats returns how much the rise limit held delays below the
// requested ones.
func (b *Nfqueue) RiseStats() RiseStats {
	var s RiseStats
	b.onLoop(func() { s = b.del.RiseStats() })
	return s
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
	err := b.rec.reset(context.Background())
	if b.rec6 != nil {
		err = errors.Join(err, b.rec6.reset(context.Background()))
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
	b.lock.release()
	return err
}
