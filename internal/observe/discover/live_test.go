package discover

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// Live test names: network namespace sanqos-dc-live, tgtd control port
// 2603, temporary directory and loop backing files under /tmp/sanqos-dc-live-*.
const (
	liveNS   = "sanqos-dc-live"
	livePort = "2603"
)

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// cleanLive removes what a crashed earlier run of this test left: our
// namespace (and the processes in it), loop devices over our files, and
// our temporary directories.
func cleanLive() {
	if out, err := exec.Command("ip", "netns", "pids", liveNS).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			_ = exec.Command("kill", "-9", pid).Run()
		}
	}
	_ = exec.Command("ip", "netns", "del", liveNS).Run()
	if out, err := exec.Command("losetup", "--list", "--json").Output(); err == nil {
		var l struct {
			Loopdevices []struct {
				Name     string `json:"name"`
				BackFile string `json:"back-file"`
			} `json:"loopdevices"`
		}
		if json.Unmarshal(out, &l) == nil {
			for _, d := range l.Loopdevices {
				if strings.Contains(d.BackFile, "/sanqos-dc-live-") {
					_ = exec.Command("losetup", "-d", d.Name).Run()
				}
			}
		}
	}
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), "sanqos-dc-live-*"))
	for _, d := range old {
		_ = os.RemoveAll(d)
	}
	_ = os.Remove("/var/run/tgtd/socket." + livePort)
	_ = os.Remove("/var/run/tgtd/socket." + livePort + ".lock")
}

// TestLiveTgt discovers from a real tgtd: a LUN on a loop device and a
// LUN on a plain file, with a libiscsi session holding both open.
func TestLiveTgt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespace, tgtd, loop device")
	}
	for _, bin := range []string{"tgtd", "tgtadm", "iscsi-perf", "losetup", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (Debian packages tgt, libiscsi-bin, mount, iproute2)", bin)
		}
	}
	cleanLive()
	t.Cleanup(cleanLive)

	dir, err := os.MkdirTemp("", "sanqos-dc-live-")
	if err != nil {
		t.Fatal(err)
	}
	loopImg, fileImg := filepath.Join(dir, "loop.img"), filepath.Join(dir, "file.img")
	for _, f := range []string{loopImg, fileImg} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(f, 16<<20); err != nil {
			t.Fatal(err)
		}
	}
	loopDev, err := exec.Command("losetup", "--find", "--show", loopImg).Output()
	if err != nil {
		t.Skipf("no loop device available: %v", err)
	}
	loop := strings.TrimSpace(string(loopDev))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", loop).Run() })

	run(t, "ip", "netns", "add", liveNS)
	run(t, "ip", "-n", liveNS, "link", "set", "lo", "up")
	tgtd := exec.Command("ip", "netns", "exec", liveNS, "tgtd", "-f", "-C", livePort)
	if err := tgtd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// tgtd ignores SIGTERM while it has targets.
		_ = tgtd.Process.Kill()
		_ = tgtd.Wait()
	})
	tgtadm := func(args ...string) string {
		return run(t, "tgtadm", append([]string{"-C", livePort, "--lld", "iscsi"}, args...)...)
	}
	deadline := time.Now().Add(5 * time.Second)
	for exec.Command("tgtadm", "-C", livePort, "--op", "show", "--mode", "sys").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatal("tgtd did not answer on control port " + livePort + " within 5 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	iqn := "iqn.2026-11.org.sanqos:live"
	tgtadm("--op", "new", "--mode", "target", "--tid", "1", "-T", iqn)
	tgtadm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", loop)
	tgtadm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "2", "-b", fileImg)
	tgtadm("--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL")

	ctx, cancel := context.WithCancel(context.Background())
	initiator := exec.CommandContext(ctx, "ip", "netns", "exec", liveNS, "iscsi-perf",
		"-i", "iqn.2026-11.org.sanqos:live-init", "-m", "1", "-b", "1", "-t", "30", "iscsi://127.0.0.1/"+iqn+"/1")
	if err := initiator.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = initiator.Wait() })

	d := New(NewTgt(ExecRunner{Timeout: 5 * time.Second}, 2603), topology.DefaultResolver(), slog.New(slog.DiscardHandler))
	var topo topology.Topology
	for deadline := time.Now().Add(10 * time.Second); ; {
		if topo, err = d.Discover(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(topo.Resources) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var devices []string
	for _, r := range topo.Resources {
		for _, c := range r.Consumers {
			if c.Addr.String() != "127.0.0.1" || !slices.Equal(c.IQNs, []string{"iqn.2026-11.org.sanqos:live-init"}) || c.Target != iqn {
				t.Errorf("consumer %+v: want 127.0.0.1, the live initiator and target", c)
			}
			devices = append(devices, c.Device)
		}
	}
	// The loop LUN is served by the loop device; the file LUN by the
	// device holding the temporary directory, if it has one (tmpfs does
	// not: then that LUN is skipped, as documented).
	want := filepath.Base(loop)
	if len(devices) == 0 || devices[0] != want && (len(devices) < 2 || devices[1] != want) {
		t.Errorf("devices = %v, want %s among them; topology %+v", devices, want, topo)
	}
	// Both LUNs land on the file system of the temporary directory, so
	// when it has a block device they share one resource.
	if len(devices) == 2 && len(topo.Resources) != 1 {
		t.Errorf("loop image and plain image in one directory gave %d resources, want 1: %+v", len(topo.Resources), topo)
	}
	t.Logf("live topology: %+v", topo)
}
