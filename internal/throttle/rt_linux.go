package throttle

// Real-time thread placement: the packet path's threads run at a
// real-time priority, each pinned to its CPU, and the process's other
// threads a little above normal. Linux only; rt_other.go says so
// elsewhere.

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// rtPriority is the SCHED_FIFO priority of the packet thread. TCP sends a
// loss probe when an ACK is late by about two RTTs; on a busy target a
// normal-priority thread can wait that long for a CPU, and every such
// stall is a retransmission. The thread sleeps between packets, and the
// kernel's RT throttling caps it anyway. 10 is low among RT priorities:
// kernel threads and anything the operator made real-time still come
// first. The cap has been needed once: a test process running three
// backends (six path threads on two CPUs) had two of them spin in the Go
// runtime (casgstatus) for 950 ms, waiting for a normal-priority thread
// that their CPUs did not let run, until RT throttling did; with the
// daemon's one backend it was not seen (see runSteps in live_test.go).
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
