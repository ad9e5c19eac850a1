package nfqbackend

import (
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/nfq"
	"github.com/sanqos/sanqos/internal/clock"
)

// The packet path's seams: its threads take time, sleeps, packets and
// waits only through pathClock and queueSocket. The backend gives them the
// kernel's (kernelClock, kernelQueue); unit tests give them fakes, so that
// hold accuracy, the standby's takeover and the rise limit are tested
// deterministically, without root and without the wall clock.

// pathClock is the packet path's time: a monotonic now (clock.Clock, which
// the Delayer takes too) and the two ways its threads sleep.
type pathClock interface {
	clock.Clock
	// Sleep sleeps in an ordinary system call: the Go scheduler sees a
	// goroutine that waits (the standby's watch, see standby).
	Sleep(d time.Duration)
	// RawSleep sleeps without telling the Go scheduler, like rawPpoll.
	RawSleep(d time.Duration)
	// Park sleeps in the Go scheduler, the goroutine parked and its P
	// free. A sleep in a system call longer than 10 ms is one the
	// scheduler's monitor takes the P back from, and each such retake
	// sets the monitor polling every 20 µs again: an idle daemon whose
	// standby slept so spent more CPU on that polling than on all its
	// own work (docs/results.md, "datapath").
	Park(d time.Duration)
}

// kernelClock is the wall clock and the kernel's sleeps.
type kernelClock struct{ clock.Real }

func (kernelClock) Sleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_ = unix.Nanosleep(&ts, nil)
}

func (kernelClock) RawSleep(d time.Duration) { rawSleep(d) }

func (kernelClock) Park(d time.Duration) { time.Sleep(d) }

// queueSocket is the packet path's side of the NFQUEUE socket.
type queueSocket interface {
	// Read hands fn the packets of one datagram; false: nothing waited.
	Read(fn func(nfq.Packet)) (bool, error)
	// Accept gives the kernel the verdicts for ids.
	Accept(ids ...uint32) error
	// sockErrors counts what the socket failed on by itself (refused
	// verdicts, bad datagrams).
	sockErrors() uint64
	Close() error
	// poller returns the waits of one path thread: on the socket and,
	// when wake ≥ 0, on that eventfd (a command, or stop).
	poller(wake int) poller
}

// poller waits for one path thread.
type poller interface {
	// wait waits at most d (0: only looks) and returns the socket's poll
	// events (0: nothing) and whether the wake eventfd is readable. An
	// interrupted wait returns nothing ready.
	wait(d time.Duration) (sock int16, woken bool, err error)
}

// kernelQueue is the nfq socket as the packet path uses it.
type kernelQueue struct{ *nfq.Socket }

func (q kernelQueue) sockErrors() uint64 { return q.Socket.Errors }

func (q kernelQueue) poller(wake int) poller {
	p := &ppoller{fds: []unix.PollFd{{Fd: int32(q.Fd()), Events: unix.POLLIN}}}
	if wake >= 0 {
		p.fds = append(p.fds, unix.PollFd{Fd: int32(wake), Events: unix.POLLIN})
	}
	return p
}

// ppoller waits in ppoll(2). Its file descriptors and timeout are kept so
// that a wait does not allocate.
type ppoller struct {
	fds []unix.PollFd
	ts  unix.Timespec
}

func (p *ppoller) wait(d time.Duration) (int16, bool, error) {
	// A real-time thread's timeouts have no timer slack: ppoll wakes
	// within microseconds of the deadline.
	p.ts = unix.NsecToTimespec(d.Nanoseconds())
	for i := range p.fds {
		p.fds[i].Revents = 0
	}
	if err := rawPpoll(p.fds, &p.ts); err != nil {
		if errors.Is(err, unix.EINTR) {
			return 0, false, nil
		}
		return 0, false, err
	}
	return p.fds[0].Revents, len(p.fds) > 1 && p.fds[1].Revents != 0, nil
}

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

// rawSleep sleeps without telling the Go scheduler, like rawPpoll.
func rawSleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
}
