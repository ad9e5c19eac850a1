package nfqbackend

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/vishvananda/netns"
)

// TestLiveSquattedLockDaemonAndCleanupRun (audit round 2, N2): with
// uid 65534 holding the abstract names of the daemon's and its wire
// counters' locks (the locks of earlier versions), `--cleanup-only` and
// the daemon still run, and the daemon, live, still keeps a second
// daemon and a clean-up of its instance out.
func TestLiveSquattedLockDaemonAndCleanupRun(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	acttest.Squat(t, l.tns, "q3260", "wq3260")
	ns, err := netns.GetFromName(l.tns)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	acttest.RemoveLockFile(t, owned.LockPath, int(ns), "q3260")

	if out, err := sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--manual", "--cleanup-only"); err != nil {
		t.Fatalf("--cleanup-only with the old lock name squatted: %v: %s", err, out)
	}
	dir := t.TempDir()
	sockA, sockB := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock")
	a := l.startDaemon(t, bin, sockA)
	out, err := sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--manual", "--socket", sockB)
	if err == nil || !strings.Contains(out, "running") {
		t.Fatalf("a second daemon beside the live one: %v: %q, want a refusal saying an instance is running", err, out)
	}
	out, err = sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--manual", "--cleanup-only")
	if err == nil || !strings.Contains(out, "running") {
		t.Fatalf("--cleanup-only against the live daemon: %v: %q, want a refusal", err, out)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.done; err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, a.stderr)
	}
}
