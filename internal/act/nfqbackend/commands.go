package nfqbackend

// The command channel: the control loop's calls (Apply, Stats) run on the
// packet thread, handed over through two eventfds.

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

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

// kick wakes the packet thread, whether it waits for packets or is
// parked idle.
func (b *Nfqueue) kick() {
	one := [8]byte{1}
	_, _ = unix.Write(b.wake, one[:])
	b.idle.wake()
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
