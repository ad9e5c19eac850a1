package nfqbackend

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/nfq"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

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
func directionOf(payload, small int) direction.Direction {
	if payload <= small {
		return direction.Write
	}
	return direction.Read
}

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
// the middle of a round (see packetpath.Delayer.Submit), one of that flow's may be
// among them.
func (b *Nfqueue) release(ids []uint32) {
	b.flushAtOnce()
	b.accept(ids)
}

// loopError logs a failure of the packet thread at most every 10 s; the
// count is in the data-path counters.
func (b *Nfqueue) loopError(err error) {
	if now := b.clk.Now(); now.Sub(b.lastLog) >= 10*time.Second {
		b.lastLog = now
		b.log.Error("packet path", "err", err)
	}
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
	defer b.place(b.cpu, "sanqos-packet", b.rt)()
	t := b.newPathThread()
	for !b.stopping.Load() {
		yield := t.yield()
		if !b.path.TryLock() {
			b.back.Store(true)
			b.clk.RawSleep(backOff)
			continue
		}
		if yield > 0 {
			b.stalls.yields.add(yield)
		}
		at, holding := b.del.Next()
		if holding && !at.After(b.clk.Now()) {
			b.del.ReleaseDue(b.clk.Now())
			b.path.Unlock()
			continue
		}
		b.path.Unlock()
		err := t.wait(at, holding)
		b.beat.Add(1)
		b.alive.Store(b.clk.Now().UnixNano())
		if !b.path.TryLock() {
			continue // the standby runs the path and handles what woke us
		}
		if err != nil {
			b.errs.Add(1)
			b.loopError(fmt.Errorf("waiting for packets: %w", err))
			b.path.Unlock()
			b.pause()
			continue
		}
		if now := b.clk.Now(); holding && t.timedOut() && !now.Before(at) {
			b.stalls.wakes.add(now.Sub(at))
		}
		t.serve()
		b.path.Unlock()
	}
	// On the way out we fail open: what we hold first, then what is
	// still waiting in the socket, in the order it came. Close removed
	// the rules before, so the socket runs dry. The standby gives the
	// path back once it sees stopping.
	for !b.path.TryLock() {
		b.clk.RawSleep(backOff)
	}
	b.del.ReleaseAll()
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
	sock := b.sock.poller(-1)
	deadline := b.clk.Now().Add(time.Second)
	for n := 0; n < 1<<16 && b.clk.Now().Before(deadline); {
		more, err := b.sock.Read(func(p nfq.Packet) { b.atOnce = append(b.atOnce, p.ID) })
		n++
		if err != nil {
			break
		}
		if more {
			continue
		}
		b.flushAtOnce()
		if ev, _, err := sock.wait(drainQuiet); err != nil || ev == 0 {
			break
		}
	}
	b.flushAtOnce()
}

// pathThread is what a thread that runs the packet path (the packet
// thread, or the standby while it has taken over) keeps for itself.
type pathThread struct {
	b       *Nfqueue
	poll    poller
	sock    int16 // the queue socket's poll events when the last wait ended
	woken   bool  // the wake eventfd ended the last wait
	yielded time.Time
	// idleSince: since when no rule has been installed (zero: one is).
	idleSince time.Time
}

func (b *Nfqueue) newPathThread() *pathThread {
	return &pathThread{b: b, yielded: b.clk.Now(), poll: b.sock.poller(b.wake)}
}

// yield gives the Go scheduler a turn every yieldEvery, at a moment when
// no packet is due within yieldRoom, and returns how long that took (0:
// it did not yield).
func (t *pathThread) yield() time.Duration {
	now := t.b.clk.Now()
	if now.Sub(t.yielded) < yieldEvery {
		return 0
	}
	if at, holding := t.b.del.Next(); holding && at.Sub(now) < yieldRoom {
		return 0
	}
	runtime.Gosched()
	t.yielded = t.b.clk.Now()
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
		wait = min(max(at.Sub(t.b.clk.Now()), 0), heartbeat)
	} else if t.parkIdle() {
		wait = 0 // only look at what woke it
	}
	var err error
	t.sock, t.woken, err = t.poll.wait(wait)
	return err
}

// idleAfter is how long no rule must have been installed before the
// packet thread parks: a packet that passed a rule on another CPU just
// before the rule went reaches the socket within microseconds.
const idleAfter = time.Second

// parkIdle parks the packet thread in the Go scheduler for up to a
// heartbeat while no rule has been installed for idleAfter and nothing
// waits in the socket: no packet can come then. Waiting in raw ppoll
// instead, the thread looks busy to the scheduler, whose monitor then
// preempts it with a signal every 10–20 ms, each one a wake-up of the
// thread and of ppoll for nothing. A command, stop and the first rule
// wake it (kick, Apply). It reports whether it parked.
func (t *pathThread) parkIdle() bool {
	b := t.b
	if b.idle == nil || b.active.Load() {
		t.idleSince = time.Time{}
		return false
	}
	now := b.clk.Now()
	if t.idleSince.IsZero() {
		t.idleSince = now
	}
	if now.Sub(t.idleSince) < idleAfter {
		return false
	}
	if sock, woken, err := t.poll.wait(0); err != nil || sock != 0 || woken {
		return false
	}
	b.idle.park(heartbeat)
	return true
}

// idler parks the packet thread (see parkIdle). Its channel holds one
// wake-up, so one that comes before the thread parks is not lost.
type idler struct {
	ch    chan struct{}
	timer *time.Timer
}

func newIdler() *idler {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &idler{ch: make(chan struct{}, 1), timer: t}
}

// park returns after d or on a wake-up.
func (i *idler) park(d time.Duration) {
	i.timer.Reset(d)
	select {
	case <-i.ch:
	case <-i.timer.C:
	}
	i.timer.Stop()
}

// wake ends a park, or the next one (nil: there is none).
func (i *idler) wake() {
	if i == nil {
		return
	}
	select {
	case i.ch <- struct{}{}:
	default:
	}
}

// timedOut reports whether the last wait ended by its timeout.
func (t *pathThread) timedOut() bool { return t.sock == 0 && !t.woken }

// serve handles what ended the last wait: a command, packets, then the
// releases that are due. The path lock is held.
func (t *pathThread) serve() {
	b := t.b
	if t.woken {
		rawEventfd(unix.SYS_READ, b.wake)
		b.runCmd()
	}
	if r := t.sock; r&(unix.POLLERR|unix.POLLNVAL) != 0 {
		b.errs.Add(1)
		b.loopError(fmt.Errorf("NFQUEUE socket: poll events %#x", r))
		b.pause()
	} else if r != 0 {
		b.receive()
	}
	b.del.ReleaseDue(b.clk.Now())
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

// pause keeps a failing packet thread from spinning at real-time
// priority.
func (b *Nfqueue) pause() { b.clk.Sleep(10 * time.Millisecond) }

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
	p, ok := packetpath.ParseTCP(pk.Payload, total)
	if !ok {
		b.errs.Add(1)
		b.atOnce = append(b.atOnce, pk.ID)
		return
	}
	small := plan.SmallOf(b.cfg.SmallSegments, b.cfg.SmallSegment, p.Flow.Sport)
	delay := b.table.Load().of(p.Flow.Dst).of(p.Payload, small)
	submit := b.del.Submit
	if p.PureAck() {
		submit = b.del.SubmitPureAck
	}
	if submit(pk.ID, p.Flow, directionOf(p.Payload, small), p.Ack, delay, b.clk.Now()) {
		b.atOnce = append(b.atOnce, pk.ID)
	}
}
