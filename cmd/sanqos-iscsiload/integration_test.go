package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/diskemu"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// The integration test runs the real binary against tgtd in a network
// namespace of its own. Names carry this area's prefix so that leftovers of
// a crashed run are found and removed, and nothing of other areas is
// touched.
const (
	nsPrefix    = "sanqos-lg-"
	testNS      = nsPrefix + "t"
	controlPort = "2602" // tgtd management port reserved for this area
	portal      = "127.0.0.1:3260"
	iqnOK       = "iqn.2010-05.sanqos.lg:ok"
	iqnACL      = "iqn.2010-05.sanqos.lg:acl"
	// iqnSlow's LUN is an image on an emulated disk whose every request
	// takes slowService and overlaps all others (slowDisk): the number
	// of commands a connection keeps outstanding shows as throughput, and
	// the disk counts how many it held at once.
	iqnSlow     = "iqn.2010-05.sanqos.lg:slow"
	slowService = 10 * time.Millisecond
)

type lab struct {
	t    *testing.T
	bin  string
	slow *slowDisk
	emu  *diskemu.Server
}

func TestAgainstTgtd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace and runs tgtd")
	}
	for _, tool := range []string{"tgtd", "tgtadm", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (Debian package tgt / iproute2)", tool)
		}
	}
	l := &lab{t: t}
	l.cleanLeftovers()
	t.Cleanup(l.cleanLeftovers)
	l.setup()

	t.Run("verify", func(t *testing.T) {
		out, stderr, err := l.run("--rw", "randwrite", "--bs", "64k", "--size", "16m", "--threads", "2", "--verify")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		s := lastSummary(t, out)
		if s.Verified == nil || *s.Verified != 2*256 || *s.Mismatches != 0 {
			t.Fatalf("verify summary %+v", s)
		}
		// Read-only verify of what is on the LUN now: same layout, same seed.
		out, stderr, err = l.run("--rw", "read", "--bs", "64k", "--size", "16m", "--threads", "2", "--verify")
		if s := lastSummary(t, out); err != nil || *s.Mismatches != 0 || *s.Verified != 512 {
			t.Fatalf("read-back: %v %s %+v", err, stderr, s)
		}
		// And a different seed sees foreign data: the check can fail.
		_, stderr, err = l.run("--rw", "read", "--bs", "64k", "--size", "1m", "--verify", "--seed", "2")
		if err == nil || !strings.Contains(stderr, "verify: 16 of 16 blocks differ") {
			t.Fatalf("wrong seed: %v %s", err, stderr)
		}
	})

	t.Run("smalljob-rate", func(t *testing.T) {
		out, stderr, err := l.run("--job", "smalljob", "--size", "16m", "--runtime", "3s", "--per-thread")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		recs, err := iolog.ReadRecords(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := iolog.Summary(recs, iolog.OpRead)
		want := float64(256 * loadspec.KiB)
		if got := float64(s.Bytes) / s.Dur; got < 0.9*want || got > 1.1*want {
			t.Errorf("achieved %.0f B/s over %.2f s, want %.0f ±10%%", got, s.Dur, want)
		}
		if iv := iolog.Select(recs, iolog.KindInterval, 0, iolog.OpRead); len(iv) != 3 {
			t.Errorf("%d per-second lines for a 3 s run", len(iv))
		}
		if iv := iolog.Select(recs, iolog.KindInterval, 1, iolog.OpRead); len(iv) != 3 {
			t.Errorf("%d per-thread lines for a 3 s run", len(iv))
		}
	})

	// Several sessions busy for seconds: libiscsi's sync calls must
	// survive the signals the Go runtime sends its threads.
	t.Run("threads-sustained", func(t *testing.T) {
		out, stderr, err := l.run("--rw", "write", "--bs", "64k", "--size", "8m", "--threads", "4",
			"--runtime", "2s", "--time-based", "--per-thread")
		if err != nil {
			t.Fatalf("%v: %s", err, stderr)
		}
		recs, err := iolog.ReadRecords(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		for th := 1; th <= 4; th++ {
			s := iolog.Select(recs, iolog.KindSummary, th, iolog.OpWrite)
			if len(s) != 1 || s[0].Bytes == 0 || s[0].Errors != 0 {
				t.Errorf("thread %d summary %+v", th, s)
			}
		}
	})

	t.Run("interrupt-logs-out", func(t *testing.T) {
		cmd := l.command("--quiet=false", "--rw", "randread", "--bs", "8k", "--threads", "3", "--runtime", "1h", "--time-based", "--rate", "1m")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// All three sessions are logged in while it runs ...
		deadline := time.Now().Add(5 * time.Second)
		for l.nexusCount(1) < 3 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if n := l.nexusCount(1); n != 3 {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%d sessions logged in, want 3 (one per thread)", n)
		}
		time.Sleep(1200 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("exit after SIGINT: %v: %s", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Fatal("did not stop within 10 s of SIGINT")
		}
		if s := lastSummary(t, out.String()); s.IOs == 0 || !strings.Contains(stderr.String(), "(interrupted)") {
			t.Errorf("summary %+v, stderr %s", s, stderr.String())
		}
		// ... and logged out afterwards.
		time.Sleep(100 * time.Millisecond)
		if n := l.nexusCount(1); n != 0 {
			t.Errorf("%d sessions left after SIGINT, want 0", n)
		}
	})

	t.Run("iodepth", func(t *testing.T) { l.testIODepth(t) })

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable", []string{"--portal", "127.0.0.1:3261"}, "cannot connect to 127.0.0.1:3261: connection refused — is tgtd running in the target namespace?"},
		{"acl-refused", []string{"--target", iqnACL}, "login to " + iqnACL + " at 127.0.0.1:3260 refused"},
		{"lun-missing", []string{"--lun", "7"}, "LUN 7 does not exist on target " + iqnOK},
		{"too-big", []string{"--size", "1g"}, "lower --size or --threads"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := l.run(append([]string{"--size", "1m"}, tc.args...)...)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want status 1", err)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || out != "" {
				t.Fatalf("stderr %q (stdout %q), want one line containing %q", stderr, out, tc.want)
			}
		})
	}
}

func lastSummary(t *testing.T, out string) iolog.Record {
	t.Helper()
	recs, err := iolog.ReadRecords(strings.NewReader(out))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, out)
	}
	if len(recs) == 0 {
		t.Fatal("no output")
	}
	s := recs[len(recs)-1]
	if s.Kind != iolog.KindSummary || s.Thread != 0 {
		t.Fatalf("last line is not the job summary: %+v", s)
	}
	return s
}

// command runs the binary in the namespace against the test target; later
// flags override the defaults.
func (l *lab) command(args ...string) *exec.Cmd {
	full := append([]string{"netns", "exec", testNS, l.bin, "--portal", portal, "--target", iqnOK, "--quiet"}, args...)
	return exec.Command("ip", full...)
}

func (l *lab) run(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := l.command(args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func (l *lab) must(name string, args ...string) string {
	l.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (l *lab) tgtadm(args ...string) string {
	l.t.Helper()
	return l.must("tgtadm", append([]string{"-C", controlPort, "--lld", "iscsi"}, args...)...)
}

// nexusCount is the number of logged-in sessions (I_T nexuses) of target tid.
func (l *lab) nexusCount(tid int) int {
	out, err := exec.Command("tgtadm", "-C", controlPort, "--lld", "iscsi", "--op", "show", "--mode", "target").Output()
	if err != nil {
		return -1
	}
	n := 0
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Target ") {
			in = strings.HasPrefix(line, fmt.Sprintf("Target %d:", tid))
		}
		if in && strings.Contains(line, "I_T nexus: ") {
			n++
		}
	}
	return n
}

func (l *lab) setup() {
	t := l.t
	dir, err := os.MkdirTemp(shmOrTemp(), "sanqos-lg-")
	if err != nil {
		t.Fatal(err)
	}
	l.bin = filepath.Join(dir, "sanqos-iscsiload")
	if out, err := exec.Command("go", "build", "-o", l.bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the load generator: %v\n%s", err, out)
	}
	img := filepath.Join(dir, "lun1.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if exec.Command("tgtadm", "-C", controlPort, "--op", "show", "--mode", "system").Run() == nil {
		t.Fatalf("a tgtd outside namespace %s answers on control port %s, which belongs to this test; stop it", testNS, controlPort)
	}
	l.mountSlowDisk(dir)
	l.must("ip", "netns", "add", testNS)
	l.must("ip", "-n", testNS, "link", "set", "lo", "up")
	tgtd := exec.Command("ip", "netns", "exec", testNS, "tgtd", "-f", "-C", controlPort)
	tgtd.Stdout, tgtd.Stderr = nil, nil
	if err := tgtd.Start(); err != nil {
		t.Fatalf("starting tgtd: %v", err)
	}
	go tgtd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for exec.Command("tgtadm", "-C", controlPort, "--op", "show", "--mode", "system").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatal("tgtd did not answer on its control port within 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.tgtadm("--op", "new", "--mode", "target", "--tid", "1", "-T", iqnOK)
	l.tgtadm("--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1", "-b", img)
	l.tgtadm("--op", "bind", "--mode", "target", "--tid", "1", "-I", "127.0.0.1")
	// Target 2 admits only an address the test never uses.
	l.tgtadm("--op", "new", "--mode", "target", "--tid", "2", "-T", iqnACL)
	l.tgtadm("--op", "new", "--mode", "logicalunit", "--tid", "2", "--lun", "1", "-b", img)
	l.tgtadm("--op", "bind", "--mode", "target", "--tid", "2", "-I", "192.0.2.1")
	if l.emu != nil {
		// O_DIRECT, so that every command reaches the emulated disk
		// rather than tgtd's page cache.
		l.tgtadm("--op", "new", "--mode", "target", "--tid", "3", "-T", iqnSlow)
		l.tgtadm("--op", "new", "--mode", "logicalunit", "--tid", "3", "--lun", "1", "-b",
			filepath.Join(l.emu.Mountpoint(), "slow.img"), "--bsoflags", "direct")
		l.tgtadm("--op", "bind", "--mode", "target", "--tid", "3", "-I", "127.0.0.1")
	}
}

// cleanLeftovers stops every process in our namespace (tgtd, a stray load
// generator), deletes the namespace and our temp directories. It is safe
// to run when nothing is there.
func (l *lab) cleanLeftovers() {
	// tgtd ignores SIGTERM; it exits on request once it has no targets.
	// The control port is this area's, so any tgtd on it is ours.
	if out, err := exec.Command("tgtadm", "-C", controlPort, "--lld", "iscsi", "--op", "show", "--mode", "target").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			var tid int
			if _, err := fmt.Sscanf(line, "Target %d:", &tid); err == nil {
				exec.Command("tgtadm", "-C", controlPort, "--lld", "iscsi", "--op", "delete", "--mode", "target",
					"--tid", strconv.Itoa(tid), "--force").Run()
			}
		}
		exec.Command("tgtadm", "-C", controlPort, "--op", "delete", "--mode", "system").Run()
	}
	// Every namespace of this area's prefix: a crashed run may have left
	// one under an older name.
	list, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(list), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		ns := f[0]
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGTERM)
					l.waitGone(pid, ns)
				}
			}
		}
		exec.Command("ip", "netns", "del", ns).Run()
	}
	if l.emu != nil {
		l.emu.Close()
		l.emu = nil
	}
	// A crashed run's emulated disk: its mount is dead (ENOTCONN).
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], filepath.Join(shmOrTemp(), nsPrefix)) {
				syscall.Unmount(f[1], syscall.MNT_DETACH)
			}
		}
	}
	matches, _ := filepath.Glob(filepath.Join(shmOrTemp(), nsPrefix+"*"))
	for _, m := range matches {
		os.RemoveAll(m)
	}
}

// waitGone waits for pid to exit, killing it if SIGTERM was not enough.
func (l *lab) waitGone(pid int, ns string) {
	for i := 0; i < 60; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if i == 20 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Logf("process %d in %s did not exit", pid, ns)
}

// shmOrTemp is where LUN images go: tmpfs when there is one, so the test
// measures the iSCSI path and not a disk.
func shmOrTemp() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}
