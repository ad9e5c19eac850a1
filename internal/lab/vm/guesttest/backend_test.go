package guesttest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	sanqosthrottle "github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

// TestNetemBackend, TestNfqueueBackend and TestEDTDaemonBackend hold the
// three delay backends to one standard on the kernel stack, each run by
// 'sanqos run --manual --backend B' and driven with 'sanqos throttle':
// ACK delay slows an initiator's writes monotonically with the delay,
// data delay slows its reads, freeing restores the rate, a flow is not
// reordered across delay changes (no SACK recovery, no retransmission
// timeout), and after kill -9 a cleanup-only run leaves no qdisc, filter,
// chain or set. After kill -9, nfqueue fails open at once, edt one TTL
// later (its entries are no longer renewed), netem not at all.
func TestNetemBackend(t *testing.T)     { backendTest(t, "netem") }
func TestNfqueueBackend(t *testing.T)   { backendTest(t, "nfqueue") }
func TestEDTDaemonBackend(t *testing.T) { backendTest(t, "edt") }

// daemonEDTTTL is how long the daemon's edt entries outlive it.
const daemonEDTTTL = sanqosthrottle.DefaultEDTTTL

// ioCount is how many 64 KiB direct I/Os one measurement makes: each costs
// at least one delayed round trip.
const ioCount = 32

func inTarget(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append(append(kstack.InTarget(), name), args...)...)
}

func runTarget(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := inTarget(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (target namespace): %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ioStats are per-I/O latencies of one run of ioCount direct I/Os.
type ioStats struct{ Min, Median, Total time.Duration }

func (s ioStats) String() string {
	return fmt.Sprintf("min %v median %v", s.Min.Round(100*time.Microsecond), s.Median.Round(100*time.Microsecond))
}

// timedIO makes ioCount sequential 64 KiB O_DIRECT writes or reads on the
// initiator's disk and times each. The tests compare minimum latencies:
// under emulation on a busy host the guest loses whole slices of time, which
// inflate some I/Os and any total, while a packet delay d is a floor under
// every I/O (the guest clock runs on while it is descheduled).
func timedIO(t *testing.T, disk string, write bool) ioStats {
	t.Helper()
	flags := os.O_RDONLY
	if write {
		flags = os.O_WRONLY
	}
	fd, err := syscall.Open("/dev/"+disk, flags|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("opening /dev/%s: %v", disk, err)
	}
	defer syscall.Close(fd)
	// O_DIRECT wants an aligned buffer: mmap gives a page-aligned one.
	buf, err := syscall.Mmap(-1, 0, 64<<10, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(buf)
	lat := make([]time.Duration, ioCount)
	start := time.Now()
	for i := range lat {
		t0 := time.Now()
		var n int
		if write {
			n, err = syscall.Pwrite(fd, buf, int64(i)*int64(len(buf)))
		} else {
			n, err = syscall.Pread(fd, buf, int64(i)*int64(len(buf)))
		}
		if err != nil || n != len(buf) {
			t.Fatalf("I/O %d on /dev/%s: %d bytes, %v", i, disk, n, err)
		}
		lat[i] = time.Since(t0)
	}
	total := time.Since(start)
	slices.Sort(lat)
	return ioStats{Min: lat[0], Median: lat[len(lat)/2], Total: total}
}

// tcpCounters reads the loss-recovery counters of the current namespace
// (initial: the initiators) or of the target's.
func tcpCounters(t *testing.T, target bool) map[string]int64 {
	t.Helper()
	var out []byte
	var err error
	if target {
		out, err = inTarget("nstat", "-asz").CombinedOutput()
	} else {
		out, err = exec.Command("nstat", "-asz").CombinedOutput()
	}
	if err != nil {
		t.Fatalf("nstat: %v\n%s", err, out)
	}
	m := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// lossKeys are the counters that a reordered or lost flow moves.
var lossKeys = []string{"TcpExtTCPSACKRecovery", "TcpExtTCPTimeouts", "TcpExtTCPRenoRecovery", "TcpExtTCPLossProbes", "TcpRetransSegs"}

func backendTest(t *testing.T, backend string) {
	s := stack(t)
	writer := s.Initiators[0]
	// LUN 2 is VG1's LV, on dm-linear: no disk delay, so the packet delay
	// is what a write waits for.
	disk := diskOf(t, s, writer, 2)
	socket := "/run/sanqos-klab-" + backend + ".sock"
	args := []string{"run", "--manual", "--backend", backend, "--socket", socket}
	if backend != "nfqueue" {
		args = append(args, "--dev", kstack.Bridge)
	}
	// Read delays are exact only without autocorking (see sanqos run --help).
	runTarget(t, "sysctl", "-qw", "net.ipv4.tcp_autocorking=0")
	daemon := inTarget(vm.GuestBin, args...)
	daemon.Stdout, daemon.Stderr = os.Stderr, os.Stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			daemon.Process.Signal(syscall.SIGTERM)
			daemon.Wait()
		}
		inTarget(vm.GuestBin, "run", "--backend", backend, "--dev", kstack.Bridge, "--cleanup-only").Run()
	})
	throttle := func(a ...string) {
		t.Helper()
		out, err := exec.Command(vm.GuestBin, append([]string{"throttle", "--socket", socket}, a...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sanqos throttle %s: %v\n%s", strings.Join(a, " "), err, out)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := exec.Command(vm.GuestBin, "throttle", "--socket", socket, "--list").Run(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the %s daemon did not answer on %s", backend, socket)
		}
		time.Sleep(200 * time.Millisecond)
	}

	beforeT, beforeI := tcpCounters(t, true), tcpCounters(t, false)
	// Writes: ACK (and R2T/response) delay, rising. Each delay is set,
	// one run lets the flow settle at it, the next is measured.
	var w []ioStats
	for _, d := range []string{"0", "5ms", "20ms"} {
		if d != "0" {
			throttle("--ip", writer.IP, "--delay", d, "--direction", "write")
		}
		timedIO(t, disk, true)
		w = append(w, timedIO(t, disk, true))
	}
	throttle("--ip", writer.IP, "--free")
	timedIO(t, disk, true) // as above: a freed flow may wind down gradually
	wFree := timedIO(t, disk, true)
	t.Logf("%s: 64 KiB writes (guest clock): free %v; 5ms %v; 20ms %v; freed again %v", backend, w[0], w[1], w[2], wFree)
	if !(w[0].Min < w[1].Min && w[1].Min < w[2].Min) {
		t.Errorf("write latency not monotonic in the delay: minimums %v, %v, %v", w[0].Min, w[1].Min, w[2].Min)
	}
	if w[1].Min < 5*time.Millisecond || w[2].Min < 20*time.Millisecond {
		t.Errorf("a write was faster than its delay: minimums %v at 5ms, %v at 20ms", w[1].Min, w[2].Min)
	}
	if wFree.Min > w[0].Min+(w[2].Min-w[0].Min)/2 {
		t.Errorf("freeing did not restore the write latency: minimum %v after, %v before, %v at 20ms", wFree.Min, w[0].Min, w[2].Min)
	}

	// Reads: data delay.
	r0 := timedIO(t, disk, false)
	throttle("--ip", writer.IP, "--delay", "20ms", "--direction", "read")
	timedIO(t, disk, false)
	r20 := timedIO(t, disk, false)
	throttle("--ip", writer.IP, "--free")
	timedIO(t, disk, false)
	rFree := timedIO(t, disk, false)
	t.Logf("%s: 64 KiB reads (guest clock): free %v; 20ms %v; freed again %v", backend, r0, r20, rFree)
	if r20.Min < 20*time.Millisecond {
		t.Errorf("a read was faster than its 20 ms delay: minimum %v", r20.Min)
	}
	if rFree.Min > r0.Min+(r20.Min-r0.Min)/2 {
		t.Errorf("freeing did not restore the read latency: minimum %v after, %v before, %v at 20ms", rFree.Min, r0.Min, r20.Min)
	}

	// Order: the delay changes above (up 0→5→20 ms, then down to 0)
	// must not have reordered a flow.
	afterT, afterI := tcpCounters(t, true), tcpCounters(t, false)
	var moved []string
	for _, k := range lossKeys {
		dt, di := afterT[k]-beforeT[k], afterI[k]-beforeI[k]
		t.Logf("%s: %s target +%d, initiators +%d", backend, k, dt, di)
		if (k == "TcpExtTCPSACKRecovery" || k == "TcpExtTCPTimeouts") && (dt != 0 || di != 0) {
			moved = append(moved, fmt.Sprintf("%s target +%d initiators +%d", k, dt, di))
		}
	}
	if len(moved) > 0 {
		t.Errorf("%s: loss recovery across delay changes: %s", backend, strings.Join(moved, "; "))
	}

	// kill -9 with a delay in force, then: does traffic pass (fail open)?
	// And a cleanup-only run must leave nothing behind.
	throttle("--ip", writer.IP, "--delay", "20ms", "--direction", "write")
	timedIO(t, disk, true)
	daemon.Process.Kill()
	daemon.Wait()
	killed = true
	if backend == "edt" {
		// Its entries lapse one TTL after the last renewal.
		time.Sleep(daemonEDTTTL + 500*time.Millisecond)
	}
	wDead := timedIO(t, disk, true)
	t.Logf("%s: writes after kill -9 with 20ms in force: %v", backend, wDead)
	switch {
	case (backend == "nfqueue" || backend == "edt") && wDead.Min >= 20*time.Millisecond:
		t.Errorf("%s did not fail open: writes after kill -9 took at least %v", backend, wDead.Min)
	case backend == "netem" && wDead.Min < 20*time.Millisecond:
		// netem is not fail-open: its qdiscs stay until a cleanup.
		t.Errorf("netem's delay vanished with its daemon (minimum %v): expected it to stay until --cleanup-only", wDead.Min)
	}
	runTarget(t, vm.GuestBin, "run", "--backend", backend, "--dev", kstack.Bridge, "--cleanup-only")
	assertClean(t)
	if wClean := timedIO(t, disk, true); wClean.Min >= 20*time.Millisecond {
		t.Errorf("after --cleanup-only writes still take at least %v", wClean.Min)
	}
}

// assertClean checks the target namespace has none of sanqos's kernel
// objects: qdiscs other than the default, tc filters, iptables chains or
// rules, ipsets.
func assertClean(t *testing.T) {
	t.Helper()
	if q := runTarget(t, "tc", "qdisc", "show", "dev", kstack.Bridge); strings.Contains(q, "htb") || strings.Contains(q, "netem") || strings.Contains(q, "prio") || strings.Contains(q, "fq ") || strings.Contains(q, "clsact") {
		t.Errorf("qdiscs left on %s:\n%s", kstack.Bridge, q)
	}
	for _, parent := range [][]string{nil, {"egress"}} {
		// Without clsact, "egress" has no filters to list and tc fails.
		out, err := inTarget("tc", append([]string{"filter", "show", "dev", kstack.Bridge}, parent...)...).CombinedOutput()
		if f := strings.TrimSpace(string(out)); err == nil && f != "" {
			t.Errorf("filters left on %s %v:\n%s", kstack.Bridge, parent, f)
		}
	}
	if r := runTarget(t, "iptables-save"); strings.Contains(strings.ToLower(r), "sanqos") {
		t.Errorf("iptables rules or chains left:\n%s", r)
	}
	if sets := runTarget(t, "ipset", "list", "-n"); strings.Contains(sets, "sanqos") {
		t.Errorf("ipsets left: %s", sets)
	}
}
