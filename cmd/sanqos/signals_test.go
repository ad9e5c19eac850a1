package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/serve/status"
)

func waitFor(t *testing.T, what string, done <-chan int, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		select {
		case code := <-done:
			t.Fatalf("daemon exited (%d) while waiting for %s", code, what)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Finding 6 of issue 14: SIGHUP killed the daemon (exit 129) without
// cleanup. It now reloads the configuration: a good one applies at the
// next tick, a bad one is refused with run's error and the old one goes
// on; SIGTERM then stops it cleanly. The signals are real, sent to this
// process (before the fix the first SIGHUP killed the test binary).
func TestRunSIGHUPReloadsAndSIGTERMCleansUp(t *testing.T) {
	dir := t.TempDir()
	proc := filepath.Join(dir, "proc")
	os.Mkdir(proc, 0o755)
	os.WriteFile(filepath.Join(proc, "diskstats"), []byte("   7       1 loop1 100 0 800 50 10 0 80 5 0 60 55 0 0 0 0 0 0\n"), 0o644)
	addr := freeAddr(t)
	sock := filepath.Join(dir, "sanqos.sock")
	cfg := filepath.Join(dir, "sanqos.toml")
	write := func(extra string) {
		text := fmt.Sprintf("backend = \"dry-run\"\ntick = \"20ms\"\nlisten = %q\nsocket = %q\n%s", addr, sock, extra)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("threshold = \"25ms\"\n")
	// A fake systemd: the daemon's notifications land here.
	nsock := filepath.Join(dir, "notify")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	t.Setenv("NOTIFY_SOCKET", nsock)
	t.Setenv("WATCHDOG_USEC", "600000")
	t.Setenv("WATCHDOG_PID", "")
	var errb bytes.Buffer
	logs := &syncWriter{w: &errb}
	logText := func() string { logs.mu.Lock(); defer logs.mu.Unlock(); return errb.String() }
	done := make(chan int, 1)
	go func() {
		done <- dispatch([]string{"run", "--config", cfg, "--proc", proc, "--consumer", "fs-lab,10.99.0.2,loop1"}, &bytes.Buffer{}, logs)
	}()
	threshold := func() float64 {
		s, err := status.Client{Addr: addr}.Get(context.Background())
		if err != nil || len(s.Resources) != 1 {
			return -1
		}
		return s.Resources[0].ThresholdMs
	}
	waitFor(t, "the first status", done, func() bool { return threshold() == 25 })

	write("threshold = \"40ms\"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "the reloaded threshold", done, func() bool { return threshold() == 40 })
	// One line says what the reload changed (issue 34).
	waitFor(t, "the reload's line", done, func() bool {
		return strings.Contains(logText(), `msg="SIGHUP: configuration read; it applies at the next tick" changed=[threshold]`)
	})

	write("threshold = \"40ms\"\ntreshold = \"5ms\"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "the refusal", done, func() bool { return strings.Contains(logText(), "configuration refused") })
	if l := logText(); !strings.Contains(l, "treshold") || !strings.Contains(l, "nothing was started") {
		t.Errorf("the refusal does not carry run's error:\n%s", l)
	}
	write(fmt.Sprintf("threshold = \"10ms\"\nrecord = %q\n", filepath.Join(dir, "rec")))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "the restart-only refusal", done, func() bool { return strings.Contains(logText(), "record changed: restart sanqos") })
	time.Sleep(100 * time.Millisecond)
	if th := threshold(); th != 40 {
		t.Errorf("after refused reloads the threshold is %v, want the running 40", th)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0; log:\n%s", code, logText())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10 s after SIGTERM")
	}
	if !strings.Contains(logText(), "throttle state removed") {
		t.Errorf("no cleanup logged:\n%s", logText())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
	var got []string
	buf := make([]byte, 512)
	for {
		nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := nc.Read(buf)
		if err != nil {
			break
		}
		got = append(got, strings.SplitN(string(buf[:n]), "\n", 2)[0])
	}
	seq := strings.Join(got, " ")
	for _, want := range []string{"READY=1", "WATCHDOG=1", "RELOADING=1", "STOPPING=1"} {
		if !strings.Contains(seq, want) {
			t.Errorf("systemd was not told %s: %s", want, seq)
		}
	}
	if got[len(got)-1] != "STOPPING=1" {
		t.Errorf("notifications %s: want STOPPING=1 last", seq)
	}
}

// SIGHUP in manual mode changes nothing and does not end the daemon.
func TestRunManualSIGHUP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("manual mode runs as root")
	}
	d, err := os.MkdirTemp("", "sanqos-hup")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d)
	sock := filepath.Join(d, "s.sock")
	var errb bytes.Buffer
	logs := &syncWriter{w: &errb}
	logText := func() string { logs.mu.Lock(); defer logs.mu.Unlock(); return errb.String() }
	done := make(chan int, 1)
	go func() {
		done <- dispatch([]string{"run", "--manual", "--backend", "dry-run", "--socket", sock}, &bytes.Buffer{}, logs)
	}()
	waitFor(t, "manual mode ready", done, func() bool { return strings.Contains(logText(), "manual throttling ready") })
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "the SIGHUP note", done, func() bool { return strings.Contains(logText(), "no configuration to reload") })
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after SIGTERM, want 0", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit 10 s after SIGTERM")
	}
}

// sigpipeEnv makes the test binary run 'sanqos run' for
// TestRunSurvivesClosedLogPipe (TestHelperRunDaemon).
const sigpipeEnv = "SANQOS_TEST_RUN_DAEMON"

// TestHelperRunDaemon is not a test: TestRunSurvivesClosedLogPipe runs it
// in a child process whose stderr it closes.
func TestHelperRunDaemon(t *testing.T) {
	args := os.Getenv(sigpipeEnv)
	if args == "" {
		t.Skip("only run by TestRunSurvivesClosedLogPipe")
	}
	os.Exit(dispatch(strings.Fields(args), os.Stdout, os.Stderr))
}

// A daemon whose log pipe closes (a log collector restarted, a shell
// pipeline ended) died of SIGPIPE at its next log line, which is the one
// it writes when told to stop: its socket (and, with nfqueue, its chain
// and ipsets) stayed behind. It must stop cleanly.
func TestRunSurvivesClosedLogPipe(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^TestHelperRunDaemon$")
	cmd.Env = append(os.Environ(), sigpipeEnv+"=run --backend dry-run --listen= --socket "+sock+" --consumer fs,10.99.0.2,loop1 --proc "+fixtureProc(t))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "sanqos daemon started") {
	}
	stderr.Close() // the reader goes away
	time.Sleep(200 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if err != nil {
		t.Errorf("daemon with a closed log pipe ended with %v, want a clean exit", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("control socket left behind: %v", err)
	}
}

func fixtureProc(t *testing.T) string {
	t.Helper()
	proc := filepath.Join(t.TempDir(), "proc")
	os.Mkdir(proc, 0o755)
	if err := os.WriteFile(filepath.Join(proc, "diskstats"), []byte("   7       1 loop1 100 0 800 50 10 0 80 5 0 60 55 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return proc
}
