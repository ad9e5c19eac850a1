package nfqbackend

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/plan"
)

// attackerIP is a second client address: a consumer of its own.
const attackerIP = "10.213.0.3"

// floodFlows is how many connections the flooding consumer opens. Its
// echo server is a process of its own (TestHelperFloodEcho) on
// floodPort: the file limit (20,000 here, and not ours to raise) does not
// fit both ends of every connection in one process. On a shared 2-CPU
// machine the test's client keeps only 6,000-7,500 of them waiting for
// a held reply at once, so the backlog budget is floodBudget rather than
// DefaultMaxBacklog: the flood overflows it by as much as the audit's
// overflowed the default one.
const (
	floodFlows  = 10000
	floodPort   = 3265
	floodBudget = DefaultMaxBacklog / 2
)

// TestLiveFloodKeepsOtherConsumersThrottled reproduces audit N3 live: a
// consumer throttled at 1 s with floodFlows lockstep connections, each
// of which has its reply held nearly all the time, holds more packets
// than the whole backlog budget, while a victim throttled at 100 ms is
// probed. The flooder loses the delay of its packets beyond its share;
// the victim's round trips stay within 10 % of its delay. Before the
// shares, the flood overflowed the backlog and the victim's packets
// passed undelayed.
func TestLiveFloodKeepsOtherConsumersThrottled(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 connections")
	}
	l := newLab(t)
	raiseFileLimit(t, floodFlows+1024)
	run(t, "ip", "-n", l.cns, "addr", "add", attackerIP+"/24", "dev", "sqtt1")
	l.floodEcho(t)
	// The rise limit would take the flood's flows tens of seconds to
	// reach 1 s; isolation is what is measured here.
	b := l.backendWith(t, NfqueueConfig{NoRiseLimit: true, MaxBacklog: floodBudget})
	victim := l.dial('e')
	defer victim.Close()
	flood := l.dialFrom(t, attackerIP, floodFlows)
	closeFlood := func() {
		for _, c := range flood {
			c.Close()
		}
	}
	defer closeFlood()
	t.Logf("%d flood connections open", len(flood))
	const victimDelay, floodDelay = 100 * time.Millisecond, time.Second
	s := plan.State{Groups: []plan.Group{
		{Name: "victim", Members: []netip.Addr{mustAddr(clientIP)}, WriteDelay: victimDelay},
		{Name: "flood", Members: []netip.Addr{mustAddr(attackerIP)}, Ports: []uint16{floodPort}, WriteDelay: floodDelay},
	}}
	if err := b.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var replies atomic.Int64
	for _, c := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lockstep(c, floodDelay, stop, &replies)
		}()
	}
	defer func() { close(stop); closeFlood(); wg.Wait() }()
	// The flood's replies are held floodDelay: after it, each flow holds
	// about one packet.
	time.Sleep(floodDelay + 500*time.Millisecond)
	var rtts []time.Duration
	maxBacklog := 0
	end := time.Now().Add(8 * time.Second)
	if err := victim.SetDeadline(end.Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Logf("flood running: %d replies, backlog %d", replies.Load(), b.Stats().Backlog)
	for time.Now().Before(end) {
		rtts = append(rtts, l.rtts(victim, 1)[0])
		maxBacklog = max(maxBacklog, b.Stats().Backlog)
		time.Sleep(50 * time.Millisecond)
	}
	st := b.Stats()
	short := 0
	for _, r := range rtts {
		if r < victimDelay*9/10 {
			short++
		}
	}
	med := median(rtts)
	t.Logf("flood: %d flows at %v, %d replies in all; victim at %v: %d probes, median %v, max %v, %d under %v; backlog up to %d (budget %d), bypassed %d, bypassers %+v",
		len(flood), floodDelay, replies.Load(), victimDelay, len(rtts), med, slices.Max(rtts), short, victimDelay*9/10, maxBacklog, floodBudget, st.Bypassed, st.Bypassers)
	if st.Bypassed == 0 {
		t.Skipf("the flood never went over its share (backlog up to %d): nothing measured", maxBacklog)
	}
	if short > 0 {
		t.Errorf("%d of %d victim probes came back in under %v: its packets lost their delay to the flood", short, len(rtts), victimDelay*9/10)
	}
	for _, c := range st.Bypassers {
		if c.Addr == mustAddr(clientIP) && c.Bypassed > 0 {
			t.Errorf("the victim had %d packets bypassed", c.Bypassed)
		}
	}
	if med > victimDelay*11/10 {
		if busy, load := loaded(); busy {
			t.Skipf("victim median %v over %v + 10%%, on a loaded machine (load %s): too late, not too early, so CPU starvation, not isolation", med, victimDelay, load)
		}
		t.Errorf("victim median %v, want within 10%% of %v", med, victimDelay)
	}
}

// lockstep sends one byte on c and waits for the echo, again and again
// (the audit's flood_lockstep.py), until stop closes; but at most once
// every period. A throttled flow is not slowed by that, since its reply
// is held a period; a flow that lost its delay is, which keeps the
// flood from starving the machine's two CPUs: the victim's round trips
// are measured by a thread of this process, which late ones would
// stretch.
func lockstep(c net.Conn, period time.Duration, stop chan struct{}, replies *atomic.Int64) {
	var b [1]byte
	for {
		start := time.Now()
		if _, err := c.Write(b[:]); err != nil {
			return
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		replies.Add(1)
		select {
		case <-stop:
			return
		case <-time.After(period - time.Since(start)):
		}
	}
}

// dialFrom opens n connections to the flood's echo server from local
// address from in the client namespace, 64 at a time.
func (l *lab) dialFrom(t *testing.T, from string, n int) []net.Conn {
	out := make([]net.Conn, n)
	errs := make(chan error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.in(l.cnsH, func() {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					c, err := d.Dial("tcp4", net.JoinHostPort(targetIP, strconv.Itoa(floodPort)))
					if err != nil {
						errs <- err
						return
					}
					out[i] = c
				}
			})
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
		t.Fatalf("opening %d connections from %s: %v", n, from, err)
	}
	return out
}

// raiseFileLimit raises the process's open-file limit to at least n
// until the test ends: both ends of every connection are ours.
func raiseFileLimit(t *testing.T, n uint64) {
	var had syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &had); err != nil {
		t.Fatal(err)
	}
	if had.Cur >= n {
		return
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, had.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		t.Skipf("cannot open %d files (limit %d): %v", n, had.Cur, err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &had) })
}

// floodEchoEnv carries the address TestHelperFloodEcho listens on.
const floodEchoEnv = "SANQOS_TEST_FLOOD_ECHO"

// floodEcho runs TestHelperFloodEcho, this test binary as a process of
// its own, in the target namespace until the test ends.
func (l *lab) floodEcho(t *testing.T) {
	cmd := exec.Command("ip", "netns", "exec", l.tns, os.Args[0], "-test.run=^TestHelperFloodEcho$", "-test.count=1")
	cmd.Env = append(os.Environ(), floodEchoEnv+"="+net.JoinHostPort(targetIP, strconv.Itoa(floodPort)))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // it exits when its stdin closes
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready") {
		t.Fatalf("the flood's echo server did not start: %q %v", line, err)
	}
}

// TestHelperFloodEcho is not a test: floodEcho runs it, in a process of
// its own, as the echo server of the flood. It echoes every connection
// on the address in floodEchoEnv until its stdin closes.
func TestHelperFloodEcho(t *testing.T) {
	addr := os.Getenv(floodEchoEnv)
	if addr == "" {
		t.Skip("the echo server of TestLiveFloodKeepsOtherConsumersThrottled; it runs it")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
