package nfqbackend

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemonRateAndDelay: 'sanqos run --manual --rate-dev' serves both
// kinds on one data path, as an administrator reaches them with 'sanqos
// throttle': a read rate caps a download without delaying the flow's
// round trips; a delay on the capped consumer is refused until the rate
// is freed; the delay then holds and the download is no longer capped;
// SIGTERM removes the chain, the sets and the HTB root.
func TestDaemonRateAndDelay(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	sock := t.TempDir() + "/s.sock"
	before, err := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
	if err != nil {
		t.Fatal(err)
	}
	free, done := l.download(time.Second)
	done()
	const rate = 4e6
	if free < 3*rate {
		t.Skipf("an unthrottled download reached only %.1f MB/s, too close to the %.0f MB/s cap to tell them apart (machine loaded)", free/1e6, rate/1e6)
	}
	d := l.startDaemon(t, bin, sock, "--rate-dev", "sqtt0")
	thr := func(args ...string) (string, error) {
		return sanqos(t, bin, append([]string{"throttle", "--socket", sock, "--ip", clientIP}, args...)...)
	}
	if out, err := thr("--rate", "4MB/s"); err != nil {
		t.Fatalf("throttle --rate: %v: %s", err, out)
	}
	out, err := sanqos(t, bin, "throttle", "--socket", sock, "--list")
	if err != nil || !strings.Contains(out, "nfqueue+htb") || !strings.Contains(out, "4MB/s") {
		t.Fatalf("list: %v\n%s\nwant backend nfqueue+htb and the 4MB/s rate", err, out)
	}
	capped, done := l.download(time.Second)
	done()
	c := l.dial('e')
	defer c.Close()
	rtt := median(l.rtts(c, 20))
	t.Logf("download free %.1f MB/s, capped at 4 MB/s: %.2f MB/s, echo RTT %v", free/1e6, capped/1e6, rtt)
	if !raceEnabled && (capped > 1.3*rate || capped < 0.7*rate) {
		t.Errorf("download %.2f MB/s under a 4 MB/s read rate", capped/1e6)
	}
	if rtt > 5*time.Millisecond {
		t.Errorf("echo RTT %v under a rate cap alone: the small segments were held", rtt)
	}
	if out, err := thr("--delay", "20ms"); err == nil || !strings.Contains(out, "free it first") {
		t.Fatalf("a delay over the rate: %v: %s, want refused", err, out)
	}
	if out, err := thr("--free"); err != nil {
		t.Fatalf("free: %v: %s", err, out)
	}
	if out, err := thr("--delay", "20ms", "--direction", "write"); err != nil {
		t.Fatalf("throttle --delay after the free: %v: %s", err, out)
	}
	l.pastRamp(c)
	delayed := median(l.rtts(c, 5))
	after, done := l.download(time.Second)
	done()
	t.Logf("after the free and a 20 ms write delay: echo RTT %v, download %.1f MB/s", delayed, after/1e6)
	if delayed < 19*time.Millisecond {
		t.Errorf("echo RTT %v under a 20 ms write delay", delayed)
	}
	if after < 2*rate {
		t.Errorf("download %.1f MB/s after the rate was freed: still capped", after/1e6)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-d.done; err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, d.stderr)
	}
	now, err := l.targetRunner.Run(t.Context(), "", "tc", "qdisc", "show", "dev", "sqtt0")
	if err != nil || now != before {
		t.Errorf("qdiscs after SIGTERM %q, before %q (%v)", now, before, err)
	}
	if left := l.ours(t); left != "" {
		t.Errorf("SIGTERM left:\n%s", left)
	}
}
