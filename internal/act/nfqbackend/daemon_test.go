package nfqbackend

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/act/qdisc"
)

// buildSanqos builds the sanqos binary into a temporary directory.
func buildSanqos(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sanqos")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sanqos")
	cmd.Dir = filepath.Join("..", "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building sanqos: %v\n%s", err, out)
	}
	return bin
}

type daemon struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

// startDaemon runs 'sanqos run --manual' in the target namespace and
// waits until it answers on its socket (it listens before its backend is
// up, and answers only after).
func (l *lab) startDaemon(t *testing.T, bin, sock string, args ...string) *daemon {
	t.Helper()
	return l.startDaemonArgs(t, nil, sock, append([]string{bin, "run", "--manual", "--socket", sock}, args...))
}

// startDaemonArgs runs argv in the target namespace with env added to
// this process's environment and waits until it answers on sock.
func (l *lab) startDaemonArgs(t *testing.T, env []string, sock string, argv []string) *daemon {
	t.Helper()
	d := &daemon{stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	d.cmd = exec.Command("ip", append([]string{"netns", "exec", l.tns}, argv...)...)
	d.cmd.Stderr = d.stderr
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.cmd.Process.Kill()
			<-d.done
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintln(c, `{"op":"list"}`)
			line, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err == nil && strings.Contains(line, `"ok":true`) {
				return d
			}
		}
		select {
		case err := <-d.done:
			t.Fatalf("daemon exited at start: %v\n%s", err, d.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon did not open %s within 20s\n%s", sock, d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sanqos(t *testing.T, bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	return string(out), err
}

// TestDaemonKillAndRestart: traffic flows again within 1 s of a kill -9
// of a throttling daemon; the next start removes the stale chain and sets;
// a clean exit (SIGTERM) leaves nothing of ours.
func TestDaemonKillAndRestart(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	sock := filepath.Join(t.TempDir(), "s.sock")

	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--list"); err == nil || !strings.Contains(out, "no sanqos daemon") {
		t.Fatalf("throttle with no daemon: %v %q, want a 'no sanqos daemon' error", err, out)
	}
	d := l.startDaemon(t, bin, sock)
	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP, "--delay", "20ms", "--direction", "both"); err != nil {
		t.Fatalf("throttle: %v: %s", err, out)
	}
	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP, "--delay", "-3ms"); err == nil {
		t.Fatalf("negative delay accepted: %s", out)
	}
	out, err := sanqos(t, bin, "throttle", "--socket", sock, "--list")
	if err != nil || !strings.Contains(out, clientIP) || !strings.Contains(out, "20ms") {
		t.Fatalf("list: %v: %q, want %s at 20ms", err, out, clientIP)
	}
	c := l.dial('e')
	defer c.Close()
	l.pastRamp(c)
	if rtt := median(l.rtts(c, 5)); rtt < 19*time.Millisecond {
		t.Fatalf("RTT %v under a 20ms throttle", rtt)
	}

	// Kill while the echo's answer is held: it is lost with the queue and
	// TCP sends it again.
	var b [1]byte
	if _, err := c.Write(b[:]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done
	killed := time.Now()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("echo held at the kill: %v", err)
	}
	t.Logf("the answer held at the kill arrived %v after it", time.Since(killed))
	for {
		start := time.Now()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatalf("echo after kill: %v", err)
		}
		if time.Since(start) < 2*time.Millisecond {
			break
		}
		if time.Since(killed) > time.Second {
			t.Fatalf("traffic still delayed %v after kill -9", time.Since(killed))
		}
	}
	t.Logf("traffic unthrottled %v after kill -9", time.Since(killed))
	if stale := l.ours(t); !strings.Contains(stale, owned.Chain) || !strings.Contains(stale, owned.SetPrefix) {
		t.Fatalf("expected a killed daemon to leave its chain and set, found:\n%s", stale)
	}

	d = l.startDaemon(t, bin, sock)
	if left := l.ours(t); left != "" {
		t.Fatalf("restart left stale objects:\n%s", left)
	}
	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP, "--delay", "5ms"); err != nil {
		t.Fatalf("throttle after restart: %v: %s", err, out)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("daemon did not exit within 10s of SIGTERM\n%s", d.stderr)
	}
	if left := l.ours(t); left != "" {
		t.Fatalf("clean exit left:\n%s", left)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after a clean exit: %v", err)
	}
	if rtt := median(l.rtts(c, 5)); rtt > 2*time.Millisecond {
		t.Errorf("RTT %v after the daemon exited, want unthrottled", rtt)
	}
	fmt.Fprint(io.Discard, d.stderr)
}

// TestLiveNetem runs the netem backend where the kernel has sch_netem;
// elsewhere it checks that choosing it fails with one clear error naming
// nfqueue and leaves the device as it was.
func TestLiveNetem(t *testing.T) {
	l := newLab(t)
	before, err := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := qdisc.NewNetem(t.Context(), qdisc.TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &owned.Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog()})
	if err != nil {
		if !strings.Contains(err.Error(), "nfqueue") {
			t.Fatalf("netem backend failed without naming nfqueue: %v", err)
		}
		after, err2 := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
		if err2 != nil || after != before {
			t.Fatalf("failed netem start changed the qdiscs: before %q after %q (%v)", before, after, err2)
		}
		if left := l.ours(t); left != "" {
			t.Fatalf("failed netem start left:\n%s", left)
		}
		t.Skipf("this kernel has no sch_netem (%v); the error and cleanup were checked", err)
	}
	t.Cleanup(func() { b.Close() })
	c := l.dial('e')
	defer c.Close()
	base := median(l.rtts(c, 20))
	l.throttle(t, b, 5*time.Millisecond, 5*time.Millisecond)
	if got := median(l.rtts(c, 20)) - base; got < 4500*time.Microsecond || got > 5500*time.Microsecond {
		t.Errorf("netem 5ms: RTT rose by %v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if left := l.ours(t); left != "" {
		t.Fatalf("Close left:\n%s", left)
	}
}

// TestLiveHTB: a read rate caps a download to about that rate while an
// upload (the write direction) is not capped; Close removes everything.
func TestLiveHTB(t *testing.T) {
	l := newLab(t)
	before, err := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := qdisc.NewHTB(t.Context(), qdisc.TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &owned.Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const rate = 4e6
	s := plan.State{Groups: []plan.Group{{Name: "tt", Members: []netipAddr{mustAddr(clientIP)}, ReadRate: rate}}}
	if err := b.Apply(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	down, done := l.download(time.Second)
	done()
	up, done := l.upload(500 * time.Millisecond)
	done()
	t.Logf("htb read rate %.0f MB/s: download %.2f MB/s, upload %.1f MB/s", rate/1e6, down/1e6, up/1e6)
	if !raceEnabled && (down > 1.3*rate || down < 0.7*rate) {
		t.Errorf("download %.2f MB/s under a %.0f MB/s read rate", down/1e6, rate/1e6)
	}
	if up < 5*rate {
		t.Errorf("upload %.1f MB/s: the write direction was capped too", up/1e6)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
	if err != nil || after != before {
		t.Fatalf("qdiscs after Close %q, before %q (%v)", after, before, err)
	}
	if left := l.ours(t); left != "" {
		t.Fatalf("Close left:\n%s", left)
	}
}
