package guesttest

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
)

// TestEDTAutoBackend: on the lab's Debian kernel (fq, clsact, cls_bpf and
// BPF loaded at boot) 'sanqos check --backend auto --dev BRIDGE' says
// edt, and 'sanqos run --manual --backend auto --dev BRIDGE' starts edt,
// says why in its log and in 'sanqos throttle --list', and a 20 ms write
// delay holds through our classifier; without --dev, auto starts nfqueue
// and says there is no dev. Each leaves nothing behind on SIGTERM.
func TestEDTAutoBackend(t *testing.T) {
	s := stack(t)
	writer := s.Initiators[0]
	disk := diskOf(t, s, writer, 2) // VG1's LV: no disk delay

	out, _ := inTarget(vm.GuestBin, "check", "--json", "--backend", "auto", "--dev", kstack.Bridge).Output()
	var rep struct {
		Backend struct{ Name, Asked, Why string }
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("sanqos check --json: %v\n%s", err, out)
	}
	t.Logf("check: backend %s (asked %s): %s", rep.Backend.Name, rep.Backend.Asked, rep.Backend.Why)
	if rep.Backend.Name != "edt" || rep.Backend.Asked != "auto" || !strings.Contains(rep.Backend.Why, "auto: edt on "+kstack.Bridge) {
		t.Errorf("check says auto is %q (asked %q) because %q; want edt on %s", rep.Backend.Name, rep.Backend.Asked, rep.Backend.Why, kstack.Bridge)
	}

	log, list := autoDaemon(t, "/run/sanqos-klab-auto.sock", "--dev", kstack.Bridge)
	if !strings.Contains(list, "backend edt") {
		t.Errorf("sanqos throttle --list: %q, want backend edt", list)
	}
	if o, err := exec.Command(vm.GuestBin, "throttle", "--socket", "/run/sanqos-klab-auto.sock", "--ip", writer.IP, "--delay", "20ms", "--direction", "write").CombinedOutput(); err != nil {
		t.Fatalf("sanqos throttle: %v\n%s", err, o)
	}
	timedIO(t, disk, true)
	held := timedIO(t, disk, true)
	t.Logf("auto (edt): writes at 20ms %v", held)
	if held.Min < 20*time.Millisecond {
		t.Errorf("auto's 20 ms write delay did not hold: minimum %v", held.Min)
	}
	if f := runTarget(t, "tc", "filter", "show", "dev", kstack.Bridge, "egress"); !strings.Contains(f, edt.FilterName) {
		t.Errorf("no %s classifier on %s egress while a delay is in force:\n%s", edt.FilterName, kstack.Bridge, f)
	}
	// The log is read once the daemon has exited: its stderr reaches the
	// buffer through exec's copying goroutine, which on the guest's one
	// CPU can still hold the start lines after the socket answers.
	stopAutoDaemon(t)
	if l := log.String(); !strings.Contains(l, "backend=edt") || !strings.Contains(l, "auto: edt on "+kstack.Bridge) {
		t.Errorf("the start log does not say edt and why:\n%s", l)
	}

	log, list = autoDaemon(t, "/run/sanqos-klab-auto-nodev.sock")
	stopAutoDaemon(t)
	if !strings.Contains(list, "backend nfqueue") || !strings.Contains(log.String(), "auto: nfqueue, not edt: no dev") {
		t.Errorf("auto without --dev: list %q, want nfqueue and the missing dev in the log:\n%s", list, log.String())
	}
}

// autoProc is the running autoDaemon.
var autoProc *exec.Cmd

// autoDaemon starts 'sanqos run --manual --backend auto' in the target
// namespace on socket and returns its log and 'sanqos throttle --list'.
func autoDaemon(t *testing.T, socket string, args ...string) (*lockedBuffer, string) {
	t.Helper()
	log := &lockedBuffer{}
	d := inTarget(vm.GuestBin, append([]string{"run", "--manual", "--backend", "auto", "--socket", socket}, args...)...)
	d.Stdout, d.Stderr = os.Stderr, io.MultiWriter(os.Stderr, log)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	autoProc = d
	t.Cleanup(func() {
		if autoProc == d {
			d.Process.Kill()
			d.Wait()
			autoProc = nil
		}
		inTarget(vm.GuestBin, "run", "--backend", "auto", "--dev", kstack.Bridge, "--cleanup-only").Run()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(vm.GuestBin, "throttle", "--socket", socket, "--list").CombinedOutput()
		if err == nil {
			return log, string(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("sanqos run --manual --backend auto %v did not answer on %s:\n%s", args, socket, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopAutoDaemon stops it with SIGTERM: it must exit 0 and leave nothing.
func stopAutoDaemon(t *testing.T) {
	t.Helper()
	d := autoProc
	autoProc = nil
	d.Process.Signal(syscall.SIGTERM)
	if err := d.Wait(); err != nil {
		t.Errorf("sanqos run --manual --backend auto after SIGTERM: %v", err)
	}
	assertClean(t)
}
