package guesttest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The data path measurement's network: a target and a client namespace
// joined by one veth pair, apart from the kernel stack's (it needs no
// iSCSI, only TCP to the target's iSCSI port, which the backends throttle
// by default).
const (
	dpTargetNS  = "sanqos-dp-tgt"
	dpClientNS  = "sanqos-dp-cli"
	dpTargetDev = "sanqos-dp-t" // in dpTargetNS: edt's --dev
	dpClientDev = "sanqos-dp-c"
	dpTargetIP  = "172.31.235.1"
	dpClientIP  = "172.31.235.2"
	dpPort      = 3260
	dpMsg       = 32 // ping-pong request and reply bytes: a small segment in both backends
	clockTick   = 100
	// dpRcvBuf bounds the client's window, as a real initiator's is
	// bounded: an unbounded window over veth, one MSS per packet, fills
	// the receiving CPU's backlog (netdev_max_backlog) and the baseline
	// flow loses packets there, which no backend causes.
	dpRcvBuf = 256 << 10
)

// dpSetup creates the namespaces and the veth pair, removed at the end
// of the test (and first, what a killed earlier run left).
func dpSetup(t *testing.T) {
	t.Helper()
	dpTeardown()
	t.Cleanup(dpTeardown)
	for _, c := range [][]string{
		{"ip", "netns", "add", dpTargetNS},
		{"ip", "netns", "add", dpClientNS},
		{"ip", "link", "add", dpTargetDev, "netns", dpTargetNS, "type", "veth", "peer", "name", dpClientDev, "netns", dpClientNS},
		{"ip", "-n", dpTargetNS, "addr", "add", dpTargetIP + "/24", "dev", dpTargetDev},
		{"ip", "-n", dpClientNS, "addr", "add", dpClientIP + "/24", "dev", dpClientDev},
		// One MSS per packet: with segmentation offload TCP hands the
		// qdisc 64 KiB super-packets, which edt's classifier sees as one
		// packet and nfqueue splits into MSS segments before queueing
		// them, so "a packet" would mean different things per backend.
		{"ip", "-n", dpTargetNS, "link", "set", dpTargetDev, "gso_max_segs", "1", "up"},
		{"ip", "-n", dpClientNS, "link", "set", dpClientDev, "gso_max_segs", "1", "up"},
		{"ip", "-n", dpTargetNS, "link", "set", "lo", "up"},
		{"ip", "-n", dpClientNS, "link", "set", "lo", "up"},
		// Read delays are exact only without autocorking (see sanqos run --help).
		{"nsenter", "--net=/run/netns/" + dpTargetNS, "sysctl", "-qw", "net.ipv4.tcp_autocorking=0"},
	} {
		sh(t, c[0], c[1:]...)
	}
}

func dpTeardown() {
	for _, ns := range []string{dpTargetNS, dpClientNS} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			exec.Command("ip", "netns", "del", ns).Run()
		}
	}
}

// inNS runs f on a thread in network namespace ns: sockets f creates
// belong to ns for good. The thread is never unlocked, so it exits with
// the goroutine and no other goroutine ever runs in ns.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("opening network namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// tcpInfo reads a connection's kernel TCP counters.
func tcpInfo(c net.Conn) (*unix.TCPInfo, error) {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	var info *unix.TCPInfo
	var ierr error
	if err := rc.Control(func(fd uintptr) { info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return nil, err
	}
	return info, ierr
}

// dpServer is the target: on each connection the first byte asks for a
// ping-pong ('p': echo dpMsg-byte messages) or a bulk flow ('b': send
// until the client half-closes). When a connection ends it reports its
// socket's counters on done.
type dpServer struct {
	ln   net.Listener
	done chan *unix.TCPInfo
	errs chan error
}

func startServer(t *testing.T) *dpServer {
	t.Helper()
	s := &dpServer{done: make(chan *unix.TCPInfo, 1), errs: make(chan error, 1)}
	err := inNS(dpTargetNS, func() (err error) {
		s.ln, err = net.Listen("tcp4", net.JoinHostPort(dpTargetIP, strconv.Itoa(dpPort)))
		return err
	})
	if err != nil {
		t.Fatalf("listening in the target namespace: %v", err)
	}
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *dpServer) serve(c net.Conn) {
	defer c.Close()
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		s.fail(fmt.Errorf("reading the mode: %w", err))
		return
	}
	var err error
	if mode[0] == 'p' {
		buf := make([]byte, dpMsg)
		for err == nil {
			if _, err = io.ReadFull(c, buf); err == nil {
				_, err = c.Write(buf)
			}
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
	} else {
		err = s.bulk(c.(*net.TCPConn))
	}
	if err != nil {
		s.fail(err)
		return
	}
	info, err := tcpInfo(c)
	if err != nil {
		s.fail(err)
		return
	}
	s.done <- info
}

// bulk sends until the client half-closes. Nagle on: every segment but
// the last is a full MSS, so every one is read-direction data.
func (s *dpServer) bulk(c *net.TCPConn) error {
	c.SetNoDelay(false)
	var stop atomic.Bool
	go func() {
		io.Copy(io.Discard, c)
		stop.Store(true)
	}()
	buf := make([]byte, 64<<10)
	for !stop.Load() {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("sending the bulk flow: %w", err)
		}
	}
	// A write returns once its data is queued: the counters are final
	// only when the client has acknowledged our FIN, after all the data.
	if err := c.CloseWrite(); err != nil {
		return fmt.Errorf("ending the bulk flow: %w", err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		info, err := tcpInfo(c)
		if err != nil {
			return err
		}
		if info.State == tcpClose {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the bulk flow did not end within 20 s (state %d, %d unacknowledged)", info.State, info.Unacked)
		}
	}
}

// tcpClose is TCP_CLOSE of the kernel's TCP states (tcp_states.h).
const tcpClose = 7

func (s *dpServer) fail(err error) {
	select {
	case s.errs <- err:
	default:
	}
}

// result waits for the target's end of the last connection.
func (s *dpServer) result(t *testing.T) *unix.TCPInfo {
	t.Helper()
	select {
	case info := <-s.done:
		return info
	case err := <-s.errs:
		t.Fatalf("target: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("target: the connection did not end within 30 s")
	}
	return nil
}

// dial connects from the client namespace and asks for mode.
func dial(t *testing.T, mode byte) net.Conn {
	t.Helper()
	var c net.Conn
	err := inNS(dpClientNS, func() (err error) {
		d := net.Dialer{Timeout: 10 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, dpRcvBuf) })
			return errors.Join(err, serr)
		}}
		c, err = d.Dial("tcp4", net.JoinHostPort(dpTargetIP, strconv.Itoa(dpPort)))
		return err
	})
	if err != nil {
		t.Fatalf("connecting to the target: %v", err)
	}
	if _, err := c.Write([]byte{mode}); err != nil {
		t.Fatal(err)
	}
	return c
}

// pingPong makes warm exchanges, then n timed ones, on a new connection,
// and returns the timed round trips and the retransmissions of both ends.
func pingPong(t *testing.T, s *dpServer, warm, n int) (rtt []time.Duration, retrans uint32) {
	t.Helper()
	c := dial(t, 'p')
	buf := make([]byte, dpMsg)
	for i := range warm + n {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatalf("ping-pong exchange %d: %v", i, err)
		}
		if i >= warm {
			rtt = append(rtt, time.Since(t0))
		}
	}
	info, err := tcpInfo(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	return rtt, info.Total_retrans + s.result(t).Total_retrans
}

// bulkResult is one bulk flow: what the target sent and the CPU the
// guest (and a process in it) spent meanwhile.
type bulkResult struct {
	segs, retrans uint32 // target's data segments sent, retransmissions
	bytes         int64
	wall          time.Duration
	cpu, procCPU  time.Duration // all CPUs busy; the process's own
}

// bulkFlow runs a bulk flow from the target to the client for d and
// measures it; pid (0: none) is the process whose CPU it reports too.
func bulkFlow(t *testing.T, s *dpServer, d time.Duration, pid int) bulkResult {
	t.Helper()
	cpu0, proc0 := busyTicks(t), procTicks(t, pid)
	start := time.Now()
	c := dial(t, 'b')
	buf := make([]byte, 256<<10)
	var r bulkResult
	for time.Since(start) < d {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("receiving the bulk flow: %v", err)
		}
		r.bytes += int64(n)
	}
	c.(*net.TCPConn).CloseWrite()
	n, err := io.CopyBuffer(io.Discard, c, buf)
	if err != nil {
		t.Fatalf("receiving the bulk flow's end: %v", err)
	}
	r.bytes += n
	c.Close()
	info := s.result(t)
	r.wall = time.Since(start)
	r.segs, r.retrans = info.Data_segs_out, info.Total_retrans
	r.cpu = ticks(busyTicks(t) - cpu0)
	r.procCPU = ticks(procTicks(t, pid) - proc0)
	return r
}

func ticks(n uint64) time.Duration { return time.Duration(n) * time.Second / clockTick }

// busyTicks sums the time all CPUs spent outside idle, iowait and steal
// (user, nice, system, irq, softirq), in clock ticks, from /proc/stat.
func busyTicks(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	fs := strings.Fields(sc.Text())
	if len(fs) < 8 || fs[0] != "cpu" {
		t.Fatalf("/proc/stat: unexpected first line %q", sc.Text())
	}
	var sum uint64
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseUint(fs[i], 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: field %d of %q: %v", i, sc.Text(), err)
		}
		sum += v
	}
	return sum
}

// procTicks is a process's user and system time (all its threads) in
// clock ticks; 0 for pid 0.
func procTicks(t *testing.T, pid int) uint64 {
	t.Helper()
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command may hold spaces: the fields that follow start after its ')'.
	fs := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fs) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	u, err1 := strconv.ParseUint(fs[11], 10, 64)
	s, err2 := strconv.ParseUint(fs[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("/proc/%d/stat: %v", pid, err)
	}
	return u + s
}
