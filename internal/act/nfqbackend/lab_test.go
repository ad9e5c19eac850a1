package nfqbackend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Live tests run in a pair of network namespaces joined by a veth: the
// "target" (where the backend runs and servers listen on the iSCSI port)
// and the "client". Names start with sanqos-tt-; leftovers of a crashed run
// are removed first and everything is removed on every exit path.
const (
	nsPrefix = "sanqos-tt-"
	targetIP = "10.213.0.1"
	clientIP = "10.213.0.2"
	iscsi    = 3260
)

type lab struct {
	t              *testing.T
	tns, cns       string
	tnsH, cnsH     netns.NsHandle
	targetRunner   owned.ExecRunner
	clientRunner   owned.ExecRunner
	rcvbuf         int     // SO_RCVBUF of the receiving side of bulk flows
	pace           float64 // bytes/s of paced downloads
	servers        []net.Listener
	upBytes        atomic.Int64
	serversStarted sync.Once
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, iptables rules and an NFQUEUE")
	}
	for _, tool := range []string{"ip", "iptables-restore", "iptables-save", "nstat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// liveNamespaces holds the names of the namespaces of this process's labs
// still in use: a test may run two labs side by side.
var liveNamespaces sync.Map

// removeLeftoverNamespaces deletes namespaces of our prefix that no live
// process of ours is using (a crashed test run's).
func removeLeftoverNamespaces(t *testing.T) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		if _, live := liveNamespaces.Load(f[0]); live {
			continue
		}
		// names are sanqos-tt-<pid>-<role>: keep those of live processes.
		parts := strings.Split(strings.TrimPrefix(f[0], nsPrefix), "-")
		if pid, err := strconv.Atoi(parts[0]); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

var labSeq atomic.Int32

// reniceSelf gives every thread of the test process nice -10 until the
// test ends. The traffic generators run in this process, standing in for
// initiators that would have machines of their own; on a shared, busy
// machine they would otherwise wait for a CPU long enough to distort the
// rates measured. The daemon's packet path sets its own (real-time)
// priority, so this does not flatter it.
//
// All threads are also pinned to the CPU the packet path uses: a veth
// delivers a packet into the backlog of the CPU that sent it, so a sender
// thread migrating between CPUs reorders its own flow (TCP then counts
// SACK reorder events and fast retransmits with no sanqos on the path),
// and so does a sender on another CPU than the one where the packet
// thread's releases deliver the ACKs that clock it. A real NIC has a
// transmit queue per flow and does not do this.
//
// The garbage collector is off meanwhile. Its threads, pinned beside the
// real-time packet thread, could not move away from it when it waits for
// one of them (see rtPriority): the process would stand still for
// RT throttling's 950 ms. The daemon pins no thread of its own there;
// TestLiveNoFreezeUnderGarbageCollection runs its threads as the daemon
// does, collecting all the time.
func reniceSelf(t *testing.T) {
	gc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(1<<30) // the limit: collect before memory runs out
	t.Cleanup(func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) })
	var all, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	cpu, _ := pathCPUs()
	one.Set(cpu)
	set := func(n int, cpus *unix.CPUSet) {
		tids, _ := processThreads()
		for _, tid := range tids {
			_ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, n)
			_ = unix.SchedSetaffinity(tid, cpus)
		}
	}
	set(-10, &one)
	t.Cleanup(func() { set(0, &all) })
}

// startCPUs are the CPUs the test process may use, before reniceSelf.
var startCPUs = func() unix.CPUSet {
	var s unix.CPUSet
	if err := unix.SchedGetaffinity(0, &s); err != nil {
		panic(err)
	}
	return s
}()

func newLab(t *testing.T) *lab {
	needRoot(t)
	removeLeftoverNamespaces(t)
	reniceSelf(t)
	n := labSeq.Add(1)
	l := &lab{t: t,
		tns:    fmt.Sprintf("%s%d-t%d", nsPrefix, os.Getpid(), n),
		cns:    fmt.Sprintf("%s%d-c%d", nsPrefix, os.Getpid(), n),
		rcvbuf: 128 << 10,
	}
	t.Cleanup(func() {
		for _, s := range l.servers {
			s.Close()
		}
		_ = exec.Command("ip", "netns", "del", l.tns).Run()
		_ = exec.Command("ip", "netns", "del", l.cns).Run()
		liveNamespaces.Delete(l.tns)
		liveNamespaces.Delete(l.cns)
	})
	liveNamespaces.Store(l.tns, true)
	liveNamespaces.Store(l.cns, true)
	run(t, "ip", "netns", "add", l.tns)
	run(t, "ip", "netns", "add", l.cns)
	run(t, "ip", "-n", l.tns, "link", "add", "sqtt0", "type", "veth", "peer", "name", "sqtt1", "netns", l.cns)
	run(t, "ip", "-n", l.tns, "addr", "add", targetIP+"/24", "dev", "sqtt0")
	run(t, "ip", "-n", l.cns, "addr", "add", clientIP+"/24", "dev", "sqtt1")
	for _, ns := range []string{l.tns, l.cns} {
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", l.tns, "link", "set", "sqtt0", "up")
	run(t, "ip", "-n", l.cns, "link", "set", "sqtt1", "up")
	var err error
	if l.tnsH, err = netns.GetFromName(l.tns); err != nil {
		t.Fatal(err)
	}
	if l.cnsH, err = netns.GetFromName(l.cns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.tnsH.Close(); l.cnsH.Close() })
	l.targetRunner = owned.ExecRunner{Prefix: []string{"ip", "netns", "exec", l.tns}}
	l.clientRunner = owned.ExecRunner{Prefix: []string{"ip", "netns", "exec", l.cns}}
	return l
}

// in runs f with the calling goroutine's thread in ns; sockets created in
// f stay in ns afterwards.
func (l *lab) in(ns netns.NsHandle, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		l.t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		l.t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // a thread stuck in another namespace would poison the test binary
		}
	}()
	f()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// sets returns ipset access in the target namespace.
func (l *lab) sets(t *testing.T) owned.Ipsets {
	h, err := netlink.NewHandleAt(l.tnsH)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return owned.Ipsets{Handle: h}
}

// backend starts the nfqueue backend in the target namespace.
func (l *lab) backend(t *testing.T) *Nfqueue { return l.backendWith(t, NfqueueConfig{}) }

// backendWith starts the nfqueue backend in the target namespace with
// cfg's options (its namespace, firewall, sets and logger are the lab's).
func (l *lab) backendWith(t *testing.T, cfg NfqueueConfig) *Nfqueue {
	cfg.NetNS = int(l.tnsH)
	cfg.Firewall = &owned.Iptables{Run: l.targetRunner}
	cfg.Sets = l.sets(t)
	cfg.Logger = quietLog()
	// The backend takes its CPUs (the packet thread's and the standby's)
	// from the thread that starts it, which reniceSelf pinned to one: it
	// starts on one with the CPUs the test process began with, as the
	// daemon does.
	var b *Nfqueue
	var err error
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var had unix.CPUSet
		if err := unix.SchedGetaffinity(0, &had); err != nil {
			t.Fatal(err)
		}
		if err := unix.SchedSetaffinity(0, &startCPUs); err != nil {
			t.Fatal(err)
		}
		defer unix.SchedSetaffinity(0, &had)
		b, err = NewNfqueue(context.Background(), cfg)
	}()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// backend is what the live tests use of a backend: throttle.Backend,
// which they cannot name (the facade imports this package).
type backend interface {
	Name() string
	Apply(ctx context.Context, s plan.State) error
	Stats() plan.Stats
	Close() error
}

func (l *lab) throttle(t *testing.T, b backend, write, read time.Duration) {
	t.Helper()
	s := plan.State{Groups: []plan.Group{{Name: "tt", Members: []netipAddr{mustAddr(clientIP)}, WriteDelay: write, ReadDelay: read}}}
	if err := b.Apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func rcvbufControl(size int) func(network, address string, c syscall.RawConn) error {
	if size == 0 {
		return nil
	}
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, size)
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// startServers listens in the target namespace on the iSCSI port: a
// connection's first byte picks its job: 'e' echo, 'u' sink (upload),
// 'd' source (download).
func (l *lab) startServers() {
	l.serversStarted.Do(func() {
		var ln net.Listener
		l.in(l.tnsH, func() {
			lc := net.ListenConfig{Control: rcvbufControl(l.rcvbuf)}
			var err error
			ln, err = lc.Listen(context.Background(), "tcp4", net.JoinHostPort(targetIP, strconv.Itoa(iscsi)))
			if err != nil {
				l.t.Fatal(err)
			}
		})
		l.servers = append(l.servers, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go l.serve(c)
			}
		}()
	})
}

func (l *lab) serve(c net.Conn) {
	defer c.Close()
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		return
	}
	switch kind[0] {
	case 'e':
		io.Copy(c, c)
	case 'u':
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			l.upBytes.Add(int64(n))
			if err != nil {
				return
			}
		}
	case 'd':
		buf := make([]byte, 256<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case 'w': // iSCSI-like sync writes: 64 KiB in, a 48-byte response out
		buf := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf[:48]); err != nil {
				return
			}
		}
	case 'i': // iSCSI sync writes with InitialR2T: a 48-byte command in,
		// a 48-byte R2T out, 64 KiB of data in, a 48-byte response out
		buf := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(c, buf[:48]); err != nil {
				return
			}
			if _, err := c.Write(buf[:48]); err != nil {
				return
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf[:48]); err != nil {
				return
			}
		}
	case 'r': // iSCSI-like sync reads: a 48-byte command in, 64 KiB out
		buf := make([]byte, 64<<10)
		for {
			if _, err := io.ReadFull(c, buf[:48]); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	case 'p': // paced download, 64 KiB reads of an initiator
		buf := make([]byte, 64<<10)
		start, sent := time.Now(), 0
		for {
			if ahead := time.Duration(float64(sent)/l.pace*1e9) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
			n, err := c.Write(buf)
			sent += n
			if err != nil {
				return
			}
		}
	}
}

func (l *lab) dial(kind byte) net.Conn {
	l.startServers()
	var c net.Conn
	l.in(l.cnsH, func() {
		d := net.Dialer{Control: rcvbufControl(l.rcvbuf), Timeout: 5 * time.Second}
		var err error
		c, err = d.Dial("tcp4", net.JoinHostPort(targetIP, strconv.Itoa(iscsi)))
		if err != nil {
			l.t.Fatal(err)
		}
	})
	if _, err := c.Write([]byte{kind}); err != nil {
		l.t.Fatal(err)
	}
	return c
}

// rtts measures n request/response round trips of one byte each.
func (l *lab) rtts(c net.Conn, n int) []time.Duration {
	var b [1]byte
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if _, err := c.Write(b[:]); err != nil {
			l.t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			l.t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// pastRamp runs enough echo round trips on c for the rise limit to bring
// the flow's delay up to the one asked for: with DefaultRiseLimit 0 → 20
// ms takes 31 packets, and each round trip is at least one.
func (l *lab) pastRamp(c net.Conn) { l.rtts(c, 40) }

// pastRampIOs is pastRamp for a 'w', 'r' or 'i' connection: each I/O brings
// at least one packet of its direction (0 → 5 ms takes 17).
func (l *lab) pastRampIOs(c net.Conn, kind byte) { l.ios(c, kind, 25) }

// ios runs n synchronous iSCSI-like I/Os on a 'w', 'r' or 'i'
// connection and returns their durations.
func (l *lab) ios(c net.Conn, kind byte, n int) []time.Duration {
	buf := make([]byte, 64<<10)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := oneIO(c, kind, buf); err != nil {
			l.t.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

// oneIO runs one synchronous I/O on a connection of kind 'w' (64 KiB out,
// 48 bytes back), 'r' (48 bytes out, 64 KiB back) or 'i' (a write with
// InitialR2T: command, R2T, data, response; two small segments of the
// target's per I/O). buf holds 64 KiB.
func oneIO(c net.Conn, kind byte, buf []byte) error {
	var exchanges [][2][]byte // send, then receive
	switch kind {
	case 'w':
		exchanges = [][2][]byte{{buf, buf[:48]}}
	case 'r':
		exchanges = [][2][]byte{{buf[:48], buf}}
	case 'i':
		exchanges = [][2][]byte{{buf[:48], buf[:48]}, {buf, buf[:48]}}
	default:
		return fmt.Errorf("no I/O of kind %q", kind)
	}
	for _, x := range exchanges {
		if _, err := c.Write(x[0]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, x[1]); err != nil {
			return err
		}
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// upload measures the bulk upload rate (bytes/s at the receiver) over d
// after a warm-up. The transfer goes on until the caller calls done, so
// that counters can be read before the flow's tail.
func (l *lab) upload(d time.Duration) (float64, func()) { return l.uploadPaced(d, 0) }

// uploadPaced is upload with the sender writing at most pace bytes/s
// (0: as fast as it can), in 64 KiB writes like an iSCSI initiator.
func (l *lab) uploadPaced(d time.Duration, pace float64) (float64, func()) {
	c := l.dial('u')
	stop := make(chan struct{})
	go func() {
		buf := make([]byte, 256<<10)
		if pace > 0 {
			buf = buf[:64<<10]
		}
		start, sent := time.Now(), 0
		for {
			if pace > 0 {
				if ahead := time.Duration(float64(sent)/pace*1e9) - time.Since(start); ahead > 0 {
					time.Sleep(ahead)
				}
			}
			select {
			case <-stop:
				return
			default:
			}
			c.SetWriteDeadline(time.Now().Add(time.Second))
			n, err := c.Write(buf)
			sent += n
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	b0, t0 := l.upBytes.Load(), time.Now()
	time.Sleep(d)
	b1, t1 := l.upBytes.Load(), time.Now()
	return float64(b1-b0) / t1.Sub(t0).Seconds(), func() { close(stop); c.Close() }
}

// download measures the bulk download rate at the client over d, like
// upload.
func (l *lab) download(d time.Duration) (float64, func()) { return l.downloadPaced(d, 0) }

// downloadPaced is download with the target sending at most pace bytes/s.
func (l *lab) downloadPaced(d time.Duration, pace float64) (float64, func()) {
	kind := byte('d')
	if pace > 0 {
		kind = 'p'
		l.pace = pace
	}
	c := l.dial(kind)
	var got atomic.Int64
	go func() {
		buf := make([]byte, 256<<10)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	b0, t0 := got.Load(), time.Now()
	time.Sleep(d)
	b1, t1 := got.Load(), time.Now()
	return float64(b1-b0) / t1.Sub(t0).Seconds(), func() { c.Close() }
}

// tcpCounters are the sender-side counters that tell why a segment was
// retransmitted, read with nstat (absolute values, history untouched).
var tcpCounters = []string{"TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPFastRetrans", "TcpExtTCPTimeouts", "TcpExtTCPSlowStartRetrans", "TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPDSACKRecv"}

func counters(t *testing.T, r owned.ExecRunner) map[string]int {
	out, err := r.Run(context.Background(), "", "nstat", append([]string{"-asz"}, tcpCounters...)...)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 {
			if n, err := strconv.Atoi(f[1]); err == nil {
				m[f[0]] = n
			}
		}
	}
	if _, ok := m["TcpRetransSegs"]; !ok {
		t.Fatalf("no TcpRetransSegs in nstat output %q", out)
	}
	m[stealKey] = stealMs(t)
	return m
}

// stealKey holds, beside the TCP counters, the machine's steal time in
// milliseconds: the time the hypervisor ran something else while one of
// this machine's CPUs had work.
const stealKey = "sanqos:steal_ms"

// stealMs reads the steal time of all CPUs from /proc/stat. The kernel
// counts it in clock ticks (10 ms): a rise of one tick means the
// hypervisor stopped a CPU of ours for about that long.
func stealMs(t *testing.T) int {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	st, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return int(st.CPUTotal.Steal*1000 + 0.5)
}

// loaded reports whether the machine's 1-minute load average exceeds its
// CPU count. Then threads (ours, the test's traffic generators, the
// kernel's softirq) wait for a CPU for tens of milliseconds, ACKs come
// late and TCP sends tail loss probes, also with nothing of ours on the
// path (the receiver's DSACK shows they were spurious).
func loaded() (bool, string) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return false, ""
	}
	f := strings.Fields(string(b))
	l, err := strconv.ParseFloat(f[0], 64)
	return err == nil && l > float64(runtime.NumCPU()), f[0]
}

// checkRetrans fails the test for retransmissions since c0. Reordering
// shows as fast retransmits or SACK/timestamp reorder events: those fail,
// unless baseline (the same flow with no throttle, measured side by side)
// showed them too. Loss probes and timeouts come from ACKs that were late
// because a thread waited for a CPU; they are tolerated only where the
// machine itself stalled: on an overloaded machine, or when the
// hypervisor stopped one of its CPUs during the measurement (steal time
// rose). A loss probe fires a jiffy or two (4-8 ms) plus twice the
// smoothed RTT after the last ACK, and a stolen tick is 10 ms: then
// probes come without sanqos too.
//
// probes is the number of spurious loss-probe retransmissions (nothing
// reordered, nothing timed out) tolerated besides: see jiffyRace.
func checkRetrans(t *testing.T, what string, r owned.ExecRunner, c0 map[string]int, baseline, probes int) string {
	t.Helper()
	re, why := retransSince(t, r, c0)
	c1 := counters(t, r)
	reorder := 0
	for _, k := range []string{"TcpExtTCPFastRetrans", "TcpExtTCPSACKReorder", "TcpExtTCPTSReorder"} {
		reorder += c1[k] - c0[k]
	}
	busy, load := loaded()
	steal := c1[stealKey] - c0[stealKey]
	onlyProbes := c1["TcpExtTCPTimeouts"] == c0["TcpExtTCPTimeouts"] && re <= probes
	switch {
	case reorder > 0 && baseline == 0:
		t.Errorf("%s: %d retransmitted segments (%s): the flow was reordered", what, re, why)
	case re > 0 && !onlyProbes && (busy || steal > 0 || raceEnabled):
		// Under the race detector the packet path runs several times
		// slower and ACKs come late; under load or steal a held packet
		// can be late whatever the delayer does: the run cannot judge
		// timing (order was judged above).
		t.Skipf("%s: %d retransmitted segments (%s) on a machine that cannot judge them: race detector %v, load average %s on %d CPUs, hypervisor stole %d ms", what, re, why, raceEnabled, load, runtime.NumCPU(), steal)
	case re > 0 && !onlyProbes:
		t.Errorf("%s: %d retransmitted segments (%s), want 0", what, re, why)
	case re > 0 || reorder > 0:
		t.Logf("%s: %d retransmissions, all loss probes within the %d this test allows; baseline reorder events %d (%s)", what, re, probes, baseline, why)
	}
	note := fmt.Sprintf("%d %s", re, why)
	if steal > 0 {
		note += fmt.Sprintf(" (steal %d ms)", steal)
	}
	return note
}

// jiffyRace is the number of spurious loss probes a bulk flow whose ACKs
// are held d may send in one measurement whatever the packet path does.
// Linux arms the probe timer at 2·SRTT + 2 ms rounded up to jiffies: below
// about 1 ms of delay that is a single 4 ms jiffy (HZ=250), which fires
// anywhere from 0 to 4 ms after it was armed, so an ACK held d, or one a
// few hundred microseconds late among thousands, now and then arrives
// after it (see RiseLimit). One is the kernel's; a packet path that is
// late or out of order makes many.
func jiffyRace(d time.Duration) int {
	if 2*d+2*time.Millisecond <= 4*time.Millisecond {
		return 1
	}
	return 0
}

// reorderEvents is the number of reordering events since c0.
func reorderEvents(t *testing.T, r owned.ExecRunner, c0 map[string]int) int {
	c1 := counters(t, r)
	n := 0
	for _, k := range []string{"TcpExtTCPFastRetrans", "TcpExtTCPSACKReorder", "TcpExtTCPTSReorder"} {
		n += c1[k] - c0[k]
	}
	return n
}

// retransSince returns the retransmitted segments since c0 and a note of
// the other counters that moved.
func retransSince(t *testing.T, r owned.ExecRunner, c0 map[string]int) (int, string) {
	c1 := counters(t, r)
	var note []string
	for _, k := range tcpCounters[1:] {
		if d := c1[k] - c0[k]; d != 0 {
			note = append(note, fmt.Sprintf("%s+%d", strings.TrimPrefix(k, "TcpExt"), d))
		}
	}
	return c1["TcpRetransSegs"] - c0["TcpRetransSegs"], strings.Join(note, " ")
}

// ours returns what of ours the target namespace's iptables and ipset hold.
func (l *lab) ours(t *testing.T) string {
	ipt, err := l.targetRunner.Run(context.Background(), "", "iptables-save", "-t", "mangle")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(ipt, "\n") {
		if strings.Contains(line, owned.Chain) {
			found = append(found, line)
		}
	}
	sets, err := l.targetRunner.Run(context.Background(), "", "ipset", "list", "-n")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range strings.Fields(sets) {
		if strings.HasPrefix(s, owned.SetPrefix) {
			found = append(found, "ipset "+s)
		}
	}
	return strings.Join(found, "\n")
}
