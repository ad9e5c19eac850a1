package guesttest

import (
	"bytes"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	sanqosthrottle "github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

const (
	edtHelperEnv = "SANQOS_EDT_HELPER" // "IP DELAY": run as the delay-holding process
	edtTTL       = 300 * time.Millisecond
	// iscsiSplit is iSCSI's small-segment split (the daemon's default),
	// in TCP payload bytes.
	iscsiSplit = sanqosthrottle.DefaultSmallSegment
)

// TestEDTHelper is not a test: TestEDTBackend runs the test binary with
// edtHelperEnv set to hold a delay the way a daemon would (renewing it
// every 100 ms) until it is killed with SIGKILL.
func TestEDTHelper(t *testing.T) {
	spec := os.Getenv(edtHelperEnv)
	if spec == "" {
		t.Skip("helper process of TestEDTBackend")
	}
	f := strings.Fields(spec)
	addr := netip.MustParseAddr(f[0])
	d, err := time.ParseDuration(f[1])
	if err != nil {
		t.Fatal(err)
	}
	e, err := edt.New("/run/netns/"+kstack.TargetNS, kstack.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	// New leaves the device bare (nothing on the path while idle); the
	// backend attaches at its first delay, as this helper does here.
	if err := e.Attach(); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("edt-helper ready\n")
	for {
		if err := e.Set(addr, kstack.Port, iscsiSplit, edt.Write, d, edtTTL); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEDTBackend holds the kernel-native EDT path (tc/BPF departure times
// + fq) to the backends' standard: write delay is a floor in order of the
// delay, freeing restores, lowering the delay does not reorder (no SACK
// recovery), and kill -9 of the process that holds it fails open within
// one TTL; a cleanup leaves no qdisc or filter.
func TestEDTBackend(t *testing.T) {
	s := stack(t)
	writer := s.Initiators[0]
	disk := diskOf(t, s, writer, 2)
	ns := "/run/netns/" + kstack.TargetNS
	t.Cleanup(func() { edt.Cleanup(ns, kstack.Bridge) })
	e, err := edt.New(ns, kstack.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Attach(); err != nil {
		t.Fatal(err)
	}
	t.Log(runTarget(t, "tc", "qdisc", "show", "dev", kstack.Bridge))
	addr := netip.MustParseAddr(writer.IP)
	before, beforeI := tcpCounters(t, true), tcpCounters(t, false)
	var w []ioStats
	for _, d := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond} {
		if d > 0 {
			if err := e.Set(addr, kstack.Port, iscsiSplit, edt.Write, d, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		timedIO(t, disk, true)
		w = append(w, timedIO(t, disk, true))
	}
	// Lower the delay under load: order must hold.
	if err := e.Set(addr, kstack.Port, iscsiSplit, edt.Write, time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	timedIO(t, disk, true)
	if err := e.Free(addr, kstack.Port); err != nil {
		t.Fatal(err)
	}
	timedIO(t, disk, true)
	wFree := timedIO(t, disk, true)
	t.Logf("edt: 64 KiB writes (guest clock): free %v; 5ms %v; 20ms %v; freed again %v", w[0], w[1], w[2], wFree)
	if !(w[0].Min < w[1].Min && w[1].Min < w[2].Min) {
		t.Errorf("write latency not monotonic in the delay: minimums %v, %v, %v", w[0].Min, w[1].Min, w[2].Min)
	}
	if w[1].Min < 5*time.Millisecond || w[2].Min < 20*time.Millisecond {
		t.Errorf("a write was faster than its delay: minimums %v at 5ms, %v at 20ms", w[1].Min, w[2].Min)
	}
	if wFree.Min > w[0].Min+(w[2].Min-w[0].Min)/2 {
		t.Errorf("freeing did not restore the write latency: minimum %v after, %v before", wFree.Min, w[0].Min)
	}
	after, afterI := tcpCounters(t, true), tcpCounters(t, false)
	for _, k := range lossKeys {
		t.Logf("edt: %s target +%d, initiators +%d", k, after[k]-before[k], afterI[k]-beforeI[k])
	}
	for _, k := range []string{"TcpExtTCPSACKRecovery", "TcpExtTCPTimeouts"} {
		if after[k] != before[k] || afterI[k] != beforeI[k] {
			t.Errorf("edt: %s moved across delay changes: target +%d, initiators +%d", k, after[k]-before[k], afterI[k]-beforeI[k])
		}
	}
	// Reads: data segments only.
	r0 := timedIO(t, disk, false)
	if err := e.Set(addr, kstack.Port, iscsiSplit, edt.Read, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	timedIO(t, disk, false)
	r20 := timedIO(t, disk, false)
	e.Free(addr, kstack.Port)
	t.Logf("edt: 64 KiB reads (guest clock): free %v; 20ms %v", r0, r20)
	if r20.Min < 20*time.Millisecond {
		t.Errorf("a read was faster than its 20 ms delay: minimum %v", r20.Min)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	assertClean(t)

	// Fail open: a process holding 20 ms dies by SIGKILL.
	helper := exec.Command(os.Args[0], "-test.run", "^TestEDTHelper$")
	helper.Env = append(os.Environ(), edtHelperEnv+"="+writer.IP+" 20ms")
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	helper.Stderr = os.Stderr
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); !strings.Contains(string(buf[:n]), "ready") {
		helper.Process.Kill()
		helper.Wait()
		t.Fatalf("edt helper: %q", buf[:n])
	}
	// The helper's program is new, so its flows ramp from 0 by the rise
	// limit: a few dozen RTT samples, fewer per write where receive
	// offload merges the write's segments.
	ramp := time.Now()
	held := timedIO(t, disk, true)
	for n := 1; held.Min < 20*time.Millisecond && time.Since(ramp) < 20*time.Second; n++ {
		held = timedIO(t, disk, true)
		t.Logf("edt: the helper's ramp, %d x %d writes: %v", n, ioCount, held)
	}
	helper.Process.Signal(syscall.SIGKILL)
	helper.Wait()
	time.Sleep(2 * edtTTL)
	dead := timedIO(t, disk, true)
	t.Logf("edt: writes with a live holder at 20ms %v; after its kill -9 and %v %v", held, 2*edtTTL, dead)
	if held.Min < 20*time.Millisecond {
		t.Errorf("the helper's 20 ms delay did not hold: minimum %v", held.Min)
	}
	if dead.Min >= 20*time.Millisecond {
		t.Errorf("edt did not fail open: writes after kill -9 still take at least %v", dead.Min)
	}
	if q := runTarget(t, "tc", "filter", "show", "dev", kstack.Bridge, "egress"); !strings.Contains(q, edt.FilterName) {
		t.Errorf("after kill -9 the classifier should still be attached (it is what fails open), filters:\n%s", q)
	}
	if err := edt.Cleanup(ns, kstack.Bridge); err != nil {
		t.Fatal(err)
	}
	assertClean(t)
}

// lockedBuffer collects a daemon's log while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEDTDaemonRepair: the autonomic daemon with the edt backend holds a
// 20 ms write delay (a manual one, through its control socket, the
// threshold too high for the controller to act), and someone deletes
// clsact (with it our filter), then the root qdisc (our fq): each time
// the daemon's read-back finds it within its 5 s cadence, logs what was
// removed, and puts it back, so that writes wait 20 ms again within 10 s.
func TestEDTDaemonRepair(t *testing.T) {
	s := stack(t)
	writer := s.Initiators[0]
	disk := diskOf(t, s, writer, 2) // VG1's LV: no disk delay
	socket := "/tmp/sanqos-edt-repair.sock"
	var log lockedBuffer
	daemon := inTarget(vm.GuestBin, "run", "--adapter", "lio", "--backend", "edt", "--dev", kstack.Bridge,
		"--threshold", "500ms", "--discovery-interval", "1s", "--listen", "", "--socket", socket)
	daemon.Stdout, daemon.Stderr = os.Stderr, io.MultiWriter(os.Stderr, &log)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			daemon.Process.Kill()
			daemon.Wait()
		}
		inTarget(vm.GuestBin, "run", "--backend", "edt", "--dev", kstack.Bridge, "--cleanup-only").Run()
	})
	deadline := time.Now().Add(30 * time.Second)
	for exec.Command(vm.GuestBin, "throttle", "--socket", socket, "--list").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the edt daemon did not answer on %s:\n%s", socket, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out, err := exec.Command(vm.GuestBin, "throttle", "--socket", socket, "--ip", writer.IP, "--delay", "20ms", "--direction", "write").CombinedOutput(); err != nil {
		t.Fatalf("sanqos throttle: %v\n%s", err, out)
	}
	// The daemon applies it at its next tick (the first after discovery).
	deadline = time.Now().Add(30 * time.Second)
	for held := timedIO(t, disk, true); held.Min < 20*time.Millisecond; held = timedIO(t, disk, true) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's 20 ms write delay does not hold after 30 s: %v\n%s", held, log.String())
		}
	}
	const repairWithin = 10 * time.Second
	var drifts []string
	for _, c := range []struct {
		del   []string
		drift string // in the daemon's repair warning
	}{
		{[]string{"clsact"}, "qdisc " + kstack.Bridge + " clsact: want clsact, found absent"},
		{[]string{"root"}, "qdisc " + kstack.Bridge + " root: want fq 5e:"},
	} {
		warned := strings.Count(log.String(), "re-installing them")
		runTarget(t, "tc", append([]string{"qdisc", "del", "dev", kstack.Bridge}, c.del...)...)
		deleted := time.Now()
		gone := timedIO(t, disk, true)
		repairedBefore := strings.Count(log.String(), "re-installing them") > warned
		t.Logf("tc qdisc del dev %s %s: writes %v right after", kstack.Bridge, c.del[0], gone)
		if gone.Min >= 20*time.Millisecond && !repairedBefore {
			t.Errorf("deleting %s did not lift the delay (%v): the repair below proves nothing", c.del[0], gone)
		}
		var back ioStats
		for {
			back = timedIO(t, disk, true)
			if back.Min >= 20*time.Millisecond {
				break
			}
			if time.Since(deleted) > repairWithin {
				t.Fatalf("the 20 ms delay is not back %v after tc qdisc del %s: writes %v\nqdiscs:\n%s\ndaemon:\n%s", repairWithin, c.del[0], back,
					runTarget(t, "tc", "qdisc", "show", "dev", kstack.Bridge), log.String())
			}
		}
		t.Logf("the delay is back %v after tc qdisc del %s: writes %v", time.Since(deleted).Round(100*time.Millisecond), c.del[0], back)
		drifts = append(drifts, c.drift)
	}
	if f := runTarget(t, "tc", "filter", "show", "dev", kstack.Bridge, "egress"); strings.Count(f, edt.FilterName) != 1 {
		t.Errorf("after the repairs, want our filter once on egress:\n%s", f)
	}
	daemon.Process.Signal(syscall.SIGTERM)
	if err := daemon.Wait(); err != nil {
		t.Errorf("sanqos run after SIGTERM: %v\n%s", err, log.String())
	}
	stopped = true
	// Read once the daemon has exited, when exec's copying goroutine has
	// delivered all of its stderr.
	for _, d := range drifts {
		if l := log.String(); !strings.Contains(l, d) {
			t.Errorf("no repair of %q logged:\n%s", d, l)
		}
	}
	assertClean(t)
}
