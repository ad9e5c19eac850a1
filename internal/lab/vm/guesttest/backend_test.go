package guesttest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

// TestNetemBackend and TestNfqueueBackend hold the two backends to one
// standard on the kernel stack: ACK delay slows an initiator's writes
// monotonically with the delay, data delay slows its reads, freeing
// restores the rate, a flow is not reordered across delay changes (no SACK
// recovery, no retransmission timeout), and after kill -9 a cleanup-only
// run leaves no qdisc, filter, chain or set.
func TestNetemBackend(t *testing.T)   { backendTest(t, "netem") }
func TestNfqueueBackend(t *testing.T) { backendTest(t, "nfqueue") }

// ioCount is how many 64 KiB direct I/Os one measurement makes: each costs
// at least one delayed round trip, so 20 ms adds 0.64 s, far above the
// emulated baseline's noise.
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

// timedDD runs one dd on the initiator's disk and returns its duration.
func timedDD(t *testing.T, disk string, write bool) time.Duration {
	t.Helper()
	args := []string{"if=/dev/" + disk, "of=/dev/null", "iflag=direct"}
	if write {
		args = []string{"if=/dev/zero", "of=/dev/" + disk, "oflag=direct"}
	}
	args = append(args, "bs=64k", "count="+strconv.Itoa(ioCount), "status=none")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, "dd", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("dd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return time.Since(start)
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
	disk := disks[writer.Name][2]
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
	// Writes: ACK (and R2T/response) delay, rising.
	var w []time.Duration
	delays := []string{"0", "5ms", "20ms"}
	for _, d := range delays {
		if d != "0" {
			throttle("--ip", writer.IP, "--delay", d, "--direction", "write")
		}
		timedDD(t, disk, true) // let the flow settle at the new delay
		w = append(w, timedDD(t, disk, true))
	}
	throttle("--ip", writer.IP, "--free")
	wFree := timedDD(t, disk, true)
	t.Logf("%s writes of %d×64 KiB (guest clock): free %v, 5ms %v, 20ms %v, freed again %v", backend, ioCount, w[0], w[1], w[2], wFree)
	if !(w[0] < w[1] && w[1] < w[2]) {
		t.Errorf("write time not monotonic in the delay: %v", w)
	}
	if min := 20 * time.Millisecond * ioCount / 2; w[2]-w[0] < min {
		t.Errorf("20 ms write delay added %v to %d writes, want at least %v", w[2]-w[0], ioCount, min)
	}
	if wFree > (w[0]+w[2])/2 {
		t.Errorf("freeing did not restore the write rate: %v after, %v before, %v at 20ms", wFree, w[0], w[2])
	}

	// Reads: data delay.
	r0 := timedDD(t, disk, false)
	throttle("--ip", writer.IP, "--delay", "20ms", "--direction", "read")
	timedDD(t, disk, false)
	r20 := timedDD(t, disk, false)
	throttle("--ip", writer.IP, "--free")
	rFree := timedDD(t, disk, false)
	t.Logf("%s reads of %d×64 KiB (guest clock): free %v, 20ms %v, freed again %v", backend, ioCount, r0, r20, rFree)
	if r20-r0 < 20*time.Millisecond*ioCount/2 {
		t.Errorf("20 ms read delay added only %v to %d reads", r20-r0, ioCount)
	}
	if rFree > (r0+r20)/2 {
		t.Errorf("freeing did not restore the read rate: %v after, %v before, %v at 20ms", rFree, r0, r20)
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
	timedDD(t, disk, true)
	daemon.Process.Kill()
	daemon.Wait()
	killed = true
	wDead := timedDD(t, disk, true)
	t.Logf("%s: writes after kill -9 with 20ms in force: %v (free %v, 20ms %v)", backend, wDead, w[0], w[2])
	if backend == "nfqueue" && wDead > (w[0]+w[2])/2 {
		t.Errorf("nfqueue did not fail open: writes took %v after kill -9, %v unthrottled", wDead, w[0])
	}
	runTarget(t, vm.GuestBin, "run", "--backend", backend, "--dev", kstack.Bridge, "--cleanup-only")
	assertClean(t)
	if wClean := timedDD(t, disk, true); wClean > (w[0]+w[2])/2 {
		t.Errorf("after --cleanup-only writes took %v, unthrottled %v", wClean, w[0])
	}
}

// assertClean checks the target namespace has none of sanqos's kernel
// objects: qdiscs other than the default, tc filters, iptables chains or
// rules, ipsets.
func assertClean(t *testing.T) {
	t.Helper()
	if q := runTarget(t, "tc", "qdisc", "show", "dev", kstack.Bridge); strings.Contains(q, "htb") || strings.Contains(q, "netem") || strings.Contains(q, "prio") || strings.Contains(q, "fq ") {
		t.Errorf("qdiscs left on %s:\n%s", kstack.Bridge, q)
	}
	if f := strings.TrimSpace(runTarget(t, "tc", "filter", "show", "dev", kstack.Bridge)); f != "" {
		t.Errorf("filters left on %s:\n%s", kstack.Bridge, f)
	}
	if r := runTarget(t, "iptables-save"); strings.Contains(strings.ToLower(r), "sanqos") {
		t.Errorf("iptables rules or chains left:\n%s", r)
	}
	if sets := runTarget(t, "ipset", "list", "-n"); strings.Contains(sets, "sanqos") {
		t.Errorf("ipsets left: %s", sets)
	}
}
