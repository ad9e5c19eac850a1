package nfqbackend

import (
	"bytes"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The standby is a second thread, on another CPU, that runs the packet
// path while the packet thread cannot. Unlike the packet thread it is not
// real-time: a real-time standby froze its CPU for 950 ms (see
// rtPriority).
//
// Why. A sender sends a TCP loss probe when no ACK has come for 2·SRTT +
// 2 ms. Held ACKs are released by the packet thread alone, on one CPU,
// and when that CPU stops the releases stop: on a virtual machine the
// hypervisor takes a vCPU away for tens to hundreds of milliseconds (steal
// time), and a kernel without full preemption wakes a real-time thread up
// to ~100 ms late behind kernel work on its CPU (cyclictest measured
// both in the lab). Meanwhile the initiators, on the other CPU, run on:
// their probe timers fire and they resend. Without sanqos the target's
// kernel sends those ACKs on the CPU where the initiator's data arrived,
// so a stalled CPU stalls the sender's timers with it. The standby puts
// the ACKs back on a CPU that runs.
//
// How. Every standbyTick while packets are held (standbyQuiet while
// rules are installed but nothing is held or queued), the standby looks
// whether work waits for the packet thread (a packet due, a packet or a
// command in the queue) while that thread has not come back from its wait
// (b.beat did not move). When that lasts standbyGrace it takes the path
// lock, which the packet thread lets go of while it waits, and runs the
// path itself until the packet thread asks for it back (b.back). Only
// one thread holds the path at a time, so verdicts keep their order; the
// handover waits, beyond milliseconds of silence on the old CPU, until
// that CPU's receive backlog is empty (see backlogEmpty), so that nothing
// it released can still be overtaken.
const (
	standbyTick = time.Millisecond
	// standbyGrace is how long due work may wait for an absent packet
	// thread before the standby takes over: one tick, so a takeover
	// comes 1–2 ms after the work fell due. It must be short because the
	// writers' probe timers are short where the delay is small: with
	// SRTT ≈ delay d the probe fires 2d + 2 ms after a send, up to a
	// 4 ms jiffy early, so a hold may be late by only about d − 2 ms.
	// With 2 ms of grace the standby came 3–4 ms late, and in a full
	// fig5.11 run two stalls of 4–5 ms at d ≈ 5 ms, neither covered,
	// made 6 loss probes. A shorter grace costs no wake-ups, only
	// takeovers of a thread that was about to come back, which hand the
	// path back within backOff.
	standbyGrace = standbyTick
	// standbyQuiet is how often the standby looks while nothing is held
	// or queued (a throttled consumer that sends nothing): each look
	// costs a timer wake-up, which on a virtual machine is expensive
	// (1000 a second took 4 % of a core here).
	standbyQuiet = 5 * time.Millisecond
	// standbyIdle is how often the standby looks while no rule sends
	// packets to the queue.
	standbyIdle = 20 * time.Millisecond
	// standbyWaitMax bounds the standby's waits while it runs the path,
	// so that it sees the packet thread ask for the path back.
	standbyWaitMax = time.Millisecond
	// backOff is how long the packet thread waits before it looks again
	// for the path the standby holds.
	backOff = 100 * time.Microsecond
)

// standby watches the packet thread and takes the path over when it
// stalls; it ends with stopping.
func (b *Nfqueue) standby() {
	defer close(b.standbyDone)
	defer b.place(b.standbyCPU, "sanqos-standby", false)()
	t := b.newPathThread()
	path := filepath.Join(b.proc, softnetStat)
	softnet, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		softnet = -1
		b.log.Warn("cannot read the CPUs' receive backlogs; the standby takes over without waiting for them", "path", path, "err", err)
	} else {
		defer unix.Close(softnet)
	}
	buf := make([]byte, 16<<10)
	var beat uint64
	wait := standbyTick
	var since time.Time // work has waited with the packet thread away since
	for !b.stopping.Load() {
		// While it watches, the standby sleeps in ordinary system calls:
		// the Go scheduler then sees a goroutine that waits, not one
		// that runs, and never has to preempt it (the path threads'
		// raw waits need yields for that, see yieldEvery, and 200
		// yields a second cost more than the watching itself). Were the
		// scheduler slow to give it a P back, a takeover would come a
		// little later; a wait never holds a packet. With no rule
		// installed there is nothing to watch, and it parks (see Park).
		if !b.active.Load() {
			b.clk.Park(standbyIdle)
			since = time.Time{}
			continue
		}
		b.clk.Sleep(wait)
		now := b.clk.Now()
		holding, pending := t.pending(now)
		wait = standbyTick
		if !holding && !pending {
			wait = standbyQuiet
		}
		if cur := b.beat.Load(); cur != beat || !pending {
			beat, since = cur, time.Time{}
			continue
		}
		if since.IsZero() {
			since = now
			continue
		}
		if now.Sub(since) < standbyGrace {
			continue
		}
		if !backlogEmpty(softnet, b.cpu, buf) {
			b.declined.Add(1)
			continue
		}
		if !b.path.TryLock() {
			continue
		}
		b.takeOver(t)
		b.path.Unlock()
		beat, since = b.beat.Load(), time.Time{}
	}
}

// pending reports whether packets are held, and whether work waits for
// the packet path: a held packet due, or a packet or command waiting in
// its file descriptors.
func (t *pathThread) pending(now time.Time) (holding, pending bool) {
	at, holding := t.b.del.Next()
	if holding && !at.After(now) {
		return true, true
	}
	var err error
	t.sock, t.woken, err = t.poll.wait(0)
	return holding, err == nil && !t.timedOut()
}

// takeOver runs the packet path on the standby until the packet thread
// asks for it back, or the backend stops. The path lock is held.
func (b *Nfqueue) takeOver(t *pathThread) {
	start := b.clk.Now()
	b.back.Store(false)
	t.yielded = start
	for !b.stopping.Load() && !b.back.Load() {
		t.yield()
		now := b.clk.Now()
		at, holding := b.del.Next()
		if holding && !at.After(now) {
			b.del.ReleaseDue(now)
			continue
		}
		if limit := now.Add(standbyWaitMax); !holding || at.After(limit) {
			at, holding = limit, true
		}
		if err := t.wait(at, holding); err != nil {
			b.errs.Add(1)
			b.loopError(err)
			break
		}
		b.alive.Store(b.clk.Now().UnixNano())
		t.serve()
	}
	b.stalls.takeovers.add(b.clk.Now().Sub(start))
}

// softnetStat lists each CPU's network receive backlog, among others;
// under the /proc root.
const softnetStat = "net/softnet_stat"

// backlogEmpty reports whether nothing waits in cpu's network receive
// backlog, read from softnet (an open softnet_stat; -1: unknown, taken as
// empty). A verdict hands a packet to the veth peer through the backlog
// of the CPU that gave it, and under load that backlog waits for
// ksoftirqd: were the standby to release a newer packet of the same flow
// while an older one still waits there, the newer one would arrive first.
func backlogEmpty(softnet, cpu int, buf []byte) bool {
	if softnet < 0 {
		return true
	}
	n, _, e := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(softnet), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
	if e != 0 {
		return true
	}
	qlen, ok := softnetBacklog(buf[:n], cpu)
	return !ok || qlen == 0
}

// softnetBacklog reads cpu's backlog length from softnet_stat: in the
// lines of 15 hex columns that Linux 5.10 and later print, the 12th is
// the backlog and the 13th the CPU. The parsing does not allocate: it
// runs on the standby's thread every tick while packets are held.
func softnetBacklog(b []byte, cpu int) (int, bool) {
	for line := range bytes.Lines(b) {
		var cols [15]uint64
		n := 0
		for f := range bytes.FieldsSeq(line) {
			v, ok := parseHex(f)
			if !ok || n == len(cols) {
				return 0, false
			}
			cols[n] = v
			n++
		}
		if n != len(cols) {
			return 0, false
		}
		if int(cols[12]) == cpu {
			return int(cols[11]), true
		}
	}
	return 0, false
}

// parseHex reads an unsigned hexadecimal number of at most 16 digits.
func parseHex(f []byte) (uint64, bool) {
	if len(f) == 0 || len(f) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range f {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}
