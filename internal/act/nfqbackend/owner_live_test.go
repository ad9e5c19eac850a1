package nfqbackend

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// TestLiveTwoDaemonsAndCleanupOnly (issue 14, finding 1): in one network
// namespace, a second daemon on another queue, a second daemon on the
// same queue, and `--cleanup-only` runs (for the live daemon's instance
// and for another) never disturb the first daemon's throttle: its chain
// and set stay, and its consumer's RTT stays at the throttle's delay.
func TestLiveTwoDaemonsAndCleanupOnly(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	dir := t.TempDir()
	sockA, sockB, sockC := filepath.Join(dir, "a.sock"), filepath.Join(dir, "b.sock"), filepath.Join(dir, "c.sock")
	a := l.startDaemon(t, bin, sockA)
	if out, err := sanqos(t, bin, "throttle", "--socket", sockA, "--ip", clientIP, "--delay", "20ms"); err != nil {
		t.Fatalf("throttle: %v: %s", err, out)
	}
	c := l.dial('e')
	defer c.Close()
	l.pastRamp(c)
	aHolds := l.ours(t)
	if !strings.Contains(aHolds, owned.Chain+"-q3260") {
		t.Fatalf("daemon A's objects are not named after its instance:\n%s", aHolds)
	}
	stillThrottled := func(after string) {
		t.Helper()
		if rtt := median(l.rtts(c, 5)); rtt < 19*time.Millisecond {
			t.Fatalf("after %s: RTT %v, want A's 20ms throttle in force", after, rtt)
		}
		if got := l.ours(t); !containsLines(got, aHolds) {
			t.Fatalf("after %s the namespace holds\n%s\nwant all of A's:\n%s", after, got, aHolds)
		}
	}
	stillThrottled("start")

	// B on another queue: its own instance, beside A.
	b := l.startDaemon(t, bin, sockB, "--queue-num", "3261")
	if out, err := sanqos(t, bin, "throttle", "--socket", sockB, "--ip", "10.213.0.9", "--delay", "5ms"); err != nil {
		t.Fatalf("throttle on B: %v: %s", err, out)
	}
	stillThrottled("a second daemon started on another queue")
	if got := l.ours(t); !strings.Contains(got, owned.Chain+"-q3261") {
		t.Fatalf("daemon B's chain is missing:\n%s", got)
	}

	// C on A's queue: refused before it touches anything.
	out, err := sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--manual", "--socket", sockC)
	if err == nil || !strings.Contains(out, "running") {
		t.Fatalf("a second daemon on A's queue: %v: %q, want a refusal saying an instance is running", err, out)
	}
	stillThrottled("a second daemon on the same queue was refused")

	// --cleanup-only for A's instance is refused; for another it sweeps
	// only what is dead.
	out, err = sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--cleanup-only")
	if err == nil || !strings.Contains(out, "running") {
		t.Fatalf("--cleanup-only against a live daemon: %v: %q, want a refusal", err, out)
	}
	stillThrottled("--cleanup-only against the live daemon")
	if out, err := sanqos(t, "ip", "netns", "exec", l.tns, bin, "run", "--cleanup-only", "--queue-num", "3262"); err != nil {
		t.Fatalf("--cleanup-only of another instance: %v: %s", err, out)
	}
	stillThrottled("--cleanup-only of another instance")

	// B exits: A's throttle stays, B's objects go.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-b.done; err != nil {
		t.Fatalf("daemon B exit: %v\n%s", err, b.stderr)
	}
	stillThrottled("daemon B exited")
	if got := l.ours(t); strings.Contains(got, "q3261") {
		t.Fatalf("daemon B left:\n%s", got)
	}
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-a.done; err != nil {
		t.Fatalf("daemon A exit: %v\n%s", err, a.stderr)
	}
	if got := l.ours(t); got != "" {
		t.Fatalf("after both exited the namespace holds:\n%s", got)
	}
}

// TestLiveSIGTERMLosesNothing (issue 14, finding 6): a daemon throttling
// echo and iSCSI-like writes at 20 ms is stopped with SIGTERM while
// packets are held: every held packet leaves, in order, before the queue
// closes, so neither side retransmits anything (noRetransmissions).
func TestLiveSIGTERMLosesNothing(t *testing.T) {
	l := newLab(t)
	bin := buildSanqos(t)
	sock := filepath.Join(t.TempDir(), "s.sock")
	d := l.startDaemon(t, bin, sock)
	if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP, "--delay", "20ms", "--direction", "both"); err != nil {
		t.Fatalf("throttle: %v: %s", err, out)
	}
	echo := l.dial('e')
	defer echo.Close()
	writes := l.dial('i')
	defer writes.Close()
	l.pastRamp(echo)
	l.pastRampIOs(writes, 'i')
	t0, c0 := counters(t, l.targetRunner), counters(t, l.clientRunner)

	// Traffic on both connections, with packets held, until the signal:
	// each loop then finishes the I/O it is in, whose packets the exit
	// must release. No new traffic starts after it: an unthrottled flow's
	// RTT falls to a tenth of a millisecond, and this VM's scheduling
	// then makes loss probes of its own (measured: 3 probes of segments
	// first sent 300–400 ms after the exit, with no daemon left), which
	// say nothing about the exit.
	stop := make(chan struct{})
	worst, echoDone := echoLoop(echo, stop)
	ioDone := ioLoop(writes, 'i', stop)
	time.Sleep(300 * time.Millisecond)
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	close(stop)
	select {
	case err := <-d.done:
		if err != nil {
			t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("daemon did not exit within 10s of SIGTERM\n%s", d.stderr)
	}
	for _, c := range []<-chan error{echoDone, ioDone} {
		if err := <-c; err != nil {
			t.Fatalf("traffic across the exit: %v", err)
		}
	}
	// Long enough for any timer of a packet lost at the exit to fire
	// (an RTO is at least 200 ms).
	time.Sleep(time.Second)
	noRetransmissions(t, l, "SIGTERM", t0, c0, worst(), 20*time.Millisecond)
}

// TestLiveSIGSTOPWorstRTT (issue 14, finding 5) measures the worst echo
// RTT, under a 20 ms throttle, when the daemon is stopped (SIGSTOP) and a
// watchdog acts after stall: by SIGKILL (what is left once the packet
// path is stuck for good), or by SIGTERM and SIGCONT (what systemd sends
// with WatchdogSignal=SIGTERM: the kill signal, then SIGCONT to a stopped
// process), after which the daemon exits cleanly. The kernel keeps a
// stopped daemon's queued packets as long as the process lives: only the
// watchdog bounds the stall.
func TestLiveSIGSTOPWorstRTT(t *testing.T) {
	const stall = time.Second // the watchdog's timeout in this measurement
	for _, how := range []string{"SIGKILL", "SIGTERM+SIGCONT"} {
		t.Run(how, func(t *testing.T) {
			l := newLab(t)
			bin := buildSanqos(t)
			sock := filepath.Join(t.TempDir(), "s.sock")
			d := l.startDaemon(t, bin, sock)
			if out, err := sanqos(t, bin, "throttle", "--socket", sock, "--ip", clientIP, "--delay", "20ms"); err != nil {
				t.Fatalf("throttle: %v: %s", err, out)
			}
			echo := l.dial('e')
			defer echo.Close()
			l.pastRamp(echo)
			t0, c0 := counters(t, l.targetRunner), counters(t, l.clientRunner)
			stop := make(chan struct{})
			worst, done := echoLoop(echo, stop)
			time.Sleep(200 * time.Millisecond)
			pid := d.cmd.Process.Pid
			// ip netns exec execs the daemon: the pid is sanqos's.
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(stall)
			if how == "SIGKILL" {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			} else {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
			<-d.done
			time.Sleep(1500 * time.Millisecond)
			close(stop)
			if err := <-done; err != nil {
				t.Fatalf("echo across the stop: %v", err)
			}
			re, why := retransSince(t, l.targetRunner, t0)
			rc, whyc := retransSince(t, l.clientRunner, c0)
			t.Logf("SIGSTOP, %v later %s: worst echo RTT %v under a 20ms throttle; retransmissions target %d (%s), initiator %d (%s)",
				stall, how, worst().Round(time.Millisecond), re, why, rc, whyc)
			if worst() > stall+time.Second {
				t.Errorf("worst RTT %v: more than a second beyond the watchdog's %v", worst(), stall)
			}
		})
	}
}

// TestLiveFloodOverflowKeepsOrder (issue 14, hostile load): a throttled
// consumer opens 1,000 connections and makes them all talk at once, and
// 50 bulk downloads run beside them, against a backlog of only 64
// packets: the backlog overflows again and again, packets pass (fail
// open), and no flow is reordered (a download's segment passing its
// held predecessors would show as SACK reordering at the target); the
// backend's heap is measured before and after.
func TestLiveFloodOverflowKeepsOrder(t *testing.T) {
	const conns, rounds, downloads, backlog = 1000, 20, 50, 64
	l := newLab(t)
	b := l.backendWith(t, NfqueueConfig{MaxBacklog: backlog, AckDelay: true})
	l.throttle(t, b, 5*time.Millisecond, 5*time.Millisecond)
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = l.dial('e')
		defer cs[i].Close()
	}
	ds := make([]net.Conn, downloads)
	for i := range ds {
		ds[i] = l.dial('d')
		defer ds[i].Close()
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t0, c0 := counters(t, l.targetRunner), counters(t, l.clientRunner)
	var wg sync.WaitGroup
	errs := make(chan error, conns+downloads)
	start := time.Now()
	var moved atomic.Int64
	for _, c := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 64<<10)
			for time.Since(start) < 3*time.Second {
				c.SetDeadline(time.Now().Add(20 * time.Second))
				n, err := c.Read(buf)
				moved.Add(int64(n))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, 200) // read direction: data segments
			for range rounds {
				c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := c.Write(msg); err != nil {
					errs <- err
					return
				}
				if _, err := io.ReadFull(c, msg); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatalf("flood: %v", err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	s := b.Stats()
	rs := b.RiseStats()
	t.Logf("%d connections × %d echoes of 200 bytes and %d downloads (%d MB) under 5ms, backlog cap %d: %v; held %d, bypassed %d, remembered ramps %d; heap %+d KiB",
		conns, rounds, downloads, moved.Load()>>20, backlog, took.Round(time.Millisecond), s.PacketsHeld, s.Bypassed, rs.Flows, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024)
	if s.Bypassed == 0 {
		t.Errorf("the backlog of %d never overflowed: the test did not test overflow", backlog)
	}
	if q, err := l.targetRunner.Run(context.Background(), "", "cat", "/proc/net/netfilter/nfnetlink_queue"); err == nil {
		// queue, portid, queued, copy mode, copy range, dropped (queue
		// full: accepted, fail open), user dropped (socket buffer full:
		// accepted), last id, 1
		t.Logf("kernel queue: %s; packet path errors %d", strings.TrimSpace(q), s.Errors)
	}
	re, why := retransSince(t, l.targetRunner, t0)
	if n := reorderEvents(t, l.targetRunner, t0) + reorderEvents(t, l.clientRunner, c0); n > 0 {
		t.Errorf("%d reordering events across the flood (target retransmissions %d: %s)", n, re, why)
	} else {
		t.Logf("target retransmissions %d (%s), no reordering", re, why)
	}
}

// nothingLost fails unless every segment retransmitted through r since c0
// was a loss probe the receiver reported back as a duplicate: no timeout,
// no fast retransmit, no probe without its DSACK.
func nothingLost(t *testing.T, what string, r owned.ExecRunner, c0 map[string]int) {
	t.Helper()
	c1 := counters(t, r)
	d := func(k string) int { return c1[k] - c0[k] }
	re, probes, dsack := d("TcpRetransSegs"), d("TcpExtTCPLossProbes"), d("TcpExtTCPDSACKRecv")
	if d("TcpExtTCPTimeouts") > 0 || d("TcpExtTCPFastRetrans") > 0 || re > probes || re > dsack {
		_, why := retransSince(t, r, c0)
		t.Errorf("%s: %d retransmitted segments (%s): want none, or only loss probes each reported back as a duplicate", what, re, why)
	}
}
