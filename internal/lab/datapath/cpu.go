package datapath

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/stat and /proc/PID/stat: 100
// on every Linux architecture sanqos builds for.
const clockTick = 100

// Ticks converts clock ticks to time.
func Ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTick }

// CPUTimes are the machine's CPU times from /proc/stat's first line, in
// clock ticks: Busy is user+nice+system+irq+softirq (all but idle,
// iowait and steal), IRQ is irq+softirq, the packet processing no
// process is charged with.
type CPUTimes struct{ Busy, IRQ uint64 }

// ReadCPU reads /proc/stat.
func ReadCPU() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, fmt.Errorf("reading the CPU times: %w", err)
	}
	return ParseStat(string(b))
}

// ParseStat reads the all-CPU line of /proc/stat.
func ParseStat(s string) (CPUTimes, error) {
	line, _, _ := strings.Cut(s, "\n")
	fs := strings.Fields(line)
	if len(fs) < 8 || fs[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]uint64
	for i := 1; i < 8; i++ {
		n, err := strconv.ParseUint(fs[i], 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat: field %d of %q: %w", i, line, err)
		}
		v[i] = n
	}
	// user nice system idle iowait irq softirq
	return CPUTimes{Busy: v[1] + v[2] + v[3] + v[6] + v[7], IRQ: v[6] + v[7]}, nil
}

// ProcTicks is a process's user and system time (all its threads) in
// clock ticks; 0 for pid 0. pid -1 is this process.
func ProcTicks(pid int) (uint64, error) {
	if pid == 0 {
		return 0, nil
	}
	path := fmt.Sprintf("/proc/%d/stat", pid)
	if pid < 0 {
		path = "/proc/self/stat"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading a process's CPU time: %w", err)
	}
	return ParseProcStat(string(b))
}

// ParseProcStat reads utime+stime from a /proc/PID/stat line.
func ParseProcStat(s string) (uint64, error) {
	// The command may hold spaces and parentheses: the fields that
	// follow start after its last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/PID/stat: no command in %q", s)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 13 {
		return 0, fmt.Errorf("/proc/PID/stat: %d fields after the command in %q", len(fs), s)
	}
	u, err := strconv.ParseUint(fs[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/PID/stat: utime %q: %w", fs[11], err)
	}
	st, err := strconv.ParseUint(fs[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/PID/stat: stime %q: %w", fs[12], err)
	}
	return u + st, nil
}

// cpuMark is a moment's CPU counters for a span's accounting.
type cpuMark struct {
	m          CPUTimes
	self, proc uint64
}

func markCPU(pid int) (cpuMark, error) {
	m, err := ReadCPU()
	if err != nil {
		return cpuMark{}, err
	}
	self, err := ProcTicks(-1)
	if err != nil {
		return cpuMark{}, err
	}
	proc, err := ProcTicks(pid)
	return cpuMark{m: m, self: self, proc: proc}, err
}

// CPUSpan is the CPU spent between two marks: Busy is every CPU's busy
// time (in a guest that runs nothing else, all of it the measurement's;
// on a shared host, other work's too); Ours is this process (client and
// target sockets), the daemon and the machine's irq and softirq time,
// the part a shared host does not blur much; Daemon is the daemon's own.
type CPUSpan struct{ Busy, Ours, Daemon time.Duration }

func (a cpuMark) to(b cpuMark) CPUSpan {
	proc := b.proc - a.proc
	return CPUSpan{Busy: Ticks(b.m.Busy - a.m.Busy), Daemon: Ticks(proc),
		Ours: Ticks(b.self - a.self + proc + b.m.IRQ - a.m.IRQ)}
}
