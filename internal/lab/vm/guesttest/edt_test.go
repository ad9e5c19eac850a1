package guesttest

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
	"github.com/sanqos/sanqos/internal/throttle/edt"
)

const (
	edtHelperEnv = "SANQOS_EDT_HELPER" // "IP DELAY": run as the delay-holding process
	edtTTL       = 300 * time.Millisecond
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
	os.Stdout.WriteString("edt-helper ready\n")
	for {
		if err := e.Set(addr, edt.Write, d, edtTTL); err != nil {
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
	t.Log(runTarget(t, "tc", "qdisc", "show", "dev", kstack.Bridge))
	addr := netip.MustParseAddr(writer.IP)
	before, beforeI := tcpCounters(t, true), tcpCounters(t, false)
	var w []ioStats
	for _, d := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond} {
		if d > 0 {
			if err := e.Set(addr, edt.Write, d, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		timedIO(t, disk, true)
		w = append(w, timedIO(t, disk, true))
	}
	// Lower the delay under load: order must hold.
	if err := e.Set(addr, edt.Write, time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	timedIO(t, disk, true)
	if err := e.Free(addr); err != nil {
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
	if err := e.Set(addr, edt.Read, 20*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	timedIO(t, disk, false)
	r20 := timedIO(t, disk, false)
	e.Free(addr)
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
	timedIO(t, disk, true)
	held := timedIO(t, disk, true)
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
