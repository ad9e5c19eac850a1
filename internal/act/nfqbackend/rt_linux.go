package nfqbackend

// Real-time thread placement: the packet thread runs at a real-time
// priority, the standby and the process's other threads a little above
// normal; both path threads are pinned to their CPUs. Linux only;
// rt_other.go says so elsewhere.

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rtPriority is the SCHED_FIFO priority of the packet thread. TCP sends a
// loss probe when an ACK is late by about two RTTs; on a busy target a
// normal-priority thread can wait that long for a CPU, and every such
// stall is a retransmission. The thread sleeps between packets, and the
// kernel's RT throttling caps it anyway. 10 is low among RT priorities:
// kernel threads and anything the operator made real-time still come
// first.
//
// Only the packet thread is real-time, and only with another CPU beside
// it, because it must never wait for a thread of its own process that it
// keeps from running, and it does wait for them: the garbage collector
// stops a running goroutine to scan its stack by marking it (a few
// instructions) and asking it to stop, and a goroutine that comes to the
// stop while the mark is still set spins until it is cleared; a
// goroutine the scheduler hands back to its thread spins likewise while
// its stack is being scanned. A real-time thread woken in such a window
// on the CPU of the collector's thread takes the CPU from it and spins,
// and its sched_yield lets no ordinary thread run beside it. Where the
// collector's thread can move to another CPU, the spin lasts until the
// kernel moves it; where it cannot (one CPU, or every other CPU taken by
// a real-time thread spinning likewise, as the standby did when it was
// real-time too), only the kernel's RT throttling ends the spin, after
// 950 ms in which no ordinary thread ran on that CPU, the target's
// included. TestLiveNoFreezeUnderGarbageCollection, collecting all the
// time with the threads placed as the daemon places them, measured a
// 951 ms stall in one of three 20 s runs with both path threads
// real-time, and none, the longest sleep 8–16 ms late, in five with the
// standby ordinary; perf showed the packet thread spinning in
// runtime.casGToPreemptScan.
const rtPriority = 10

// boost locks the calling goroutine to its thread, makes the thread
// real-time and pins it to cpu, until the returned undo gives the thread
// back as it was. It stays on one CPU because an accepted packet is
// transmitted from the thread that accepted it: on a veth (and any device
// without a queue) it lands in that CPU's backlog, so verdicts for one
// flow issued from two CPUs could leave in the wrong order (the standby
// therefore waits for the packet CPU's backlog to empty before it takes
// over). Failures only cost latency or order under load, so they are
// logged, not fatal.
//
// The thread takes name (ps -L and top -H show it) and becomes real-time
// only if rt; otherwise it keeps the process's raised nice value. undo
// matters where the thread would outlive its goroutine: the main thread
// never exits, and would stay real-time and named.
func (b *Nfqueue) boost(cpu int, name string, rt bool) (undo func()) {
	runtime.LockOSThread()
	var had unix.CPUSet
	hadSet := unix.SchedGetaffinity(0, &had) == nil
	hadAttr, hadAttrErr := unix.SchedGetAttr(0, 0)
	hadName := make([]byte, 16)
	hadNameErr := unix.Prctl(unix.PR_GET_NAME, uintptr(unsafe.Pointer(&hadName[0])), 0, 0, 0)
	setName(name)
	// Timeouts to the microsecond, as a real-time thread has them
	// anyway: an ordinary thread's ppoll may otherwise wake 50 µs late.
	hadSlack, _ := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0)
	if rt {
		if err := unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: rtPriority}, 0); err != nil {
			b.log.Warn("packet path runs at normal priority; delays may stretch under CPU load", "err", err)
		}
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.log.Warn("packet path not pinned to one CPU", "cpu", cpu, "err", err)
	}
	return func() {
		if hadSet {
			_ = unix.SchedSetaffinity(0, &had)
		}
		if hadAttrErr == nil {
			_ = unix.SchedSetAttr(0, hadAttr, 0)
		}
		if hadNameErr == nil {
			setName(unix.ByteSliceToString(hadName))
		}
		_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(max(hadSlack, 1)), 0, 0, 0)
		runtime.UnlockOSThread()
	}
}

// setName names the calling thread (15 bytes at most).
func setName(name string) {
	if p, err := unix.BytePtrFromString(name); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
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
// create them. proc is the /proc root.
func raiseOtherThreads(proc string) error {
	tids, err := threadsUnder(proc)
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
