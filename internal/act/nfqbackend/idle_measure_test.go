package nfqbackend

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/stats"
)

// TestMeasureIdlePath (issue 35) measures what a daemon that knows a
// consumer and throttles nobody costs its data path, side by side with no
// daemon at all, in ABBA pairs (SANQOS_IDLE_PAIRS, default 20):
//
//	SANQOS_IDLE_MEASURE=1 go test -timeout 30m -run TestMeasureIdlePath -v ./internal/act/nfqbackend
//
// Each arm is one second of bulk upload from the client namespace to
// the target's port 3260 over veth, then one second of 4 KiB
// request/response round trips; the daemon arm runs `sanqos run` in the
// target namespace with the client as a fixed consumer, controller
// none and wire attribution (the counters read every tick). It logs,
// per workload, the median daemon/none ratio with its distribution-free
// 99 % interval, and the client's retransmitted segments and DSACKs in
// each arm. SANQOS_IDLE_BIN measures another sanqos binary (an older
// build, say) instead of this tree's; SANQOS_IDLE_ARGS adds flags to its
// command line ("--backend htb --dev sqtt0" for the htb backend). It
// asserts only what is not noise: the daemon arm must not
// retransmit where the other does not. The statistics are
// internal/lab/datapath's, and 'sanqos lab run datapath' measures the
// same (SIGSTOP switching) per backend without this test's lab.
//
// SANQOS_IDLE_SWITCH=stop narrows the interval: one daemon runs the
// whole measurement and the arm without it holds it stopped (SIGSTOP),
// so arms can be short (SANQOS_IDLE_ARM, default 1s) and many. With
// nobody throttled nothing of the daemon's is on the path
// (TestLiveIdlePathAudit), so what the two arms differ in is the
// daemon's own CPU and memory traffic, which is what an idle daemon can
// cost a transfer beside it; the restart per arm measures the same plus
// whatever a start and a stop leave behind.
func TestMeasureIdlePath(t *testing.T) {
	if os.Getenv("SANQOS_IDLE_MEASURE") == "" {
		t.Skip("a measurement of minutes: set SANQOS_IDLE_MEASURE=1")
	}
	pairs := 20
	if s := os.Getenv("SANQOS_IDLE_PAIRS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			t.Fatalf("SANQOS_IDLE_PAIRS=%q: want a number of pairs ≥ 2", s)
		}
		pairs = n
	}
	armTime := time.Second
	if s := os.Getenv("SANQOS_IDLE_ARM"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 50*time.Millisecond {
			t.Fatalf("SANQOS_IDLE_ARM=%q: want a duration of at least 50ms", s)
		}
		armTime = d
	}
	l := newLab(t)
	l.rcvbuf = 0                        // the kernel's autotuning, as a real initiator has
	bin := os.Getenv("SANQOS_IDLE_BIN") // another build to compare, e.g. an older one
	if bin == "" {
		bin = buildSanqos(t)
	}
	arm := l.idleArms(t, bin, os.Getenv("SANQOS_IDLE_SWITCH"))
	t.Logf("%d ABBA pairs of arms of %v of each workload; the daemon switched by %q (\"\": a start per arm)",
		pairs, armTime, os.Getenv("SANQOS_IDLE_SWITCH"))
	type result struct{ bulk, rr, retrans, dsack []float64 }
	var arms [2]result // 0: no daemon, 1: daemon
	for i := range pairs {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, a := range order {
			stop := arm(a == 1)
			before := counters(t, l.clientRunner)
			bulk, done := l.upload(armTime)
			done()
			after := counters(t, l.clientRunner)
			rr := l.roundTrips(4<<10, armTime)
			stop()
			arms[a].bulk = append(arms[a].bulk, bulk)
			arms[a].rr = append(arms[a].rr, rr)
			arms[a].retrans = append(arms[a].retrans, float64(after["TcpRetransSegs"]-before["TcpRetransSegs"]))
			arms[a].dsack = append(arms[a].dsack, float64(after["TcpExtTCPDSACKRecv"]-before["TcpExtTCPDSACKRecv"]))
		}
	}
	for _, w := range []struct {
		name string
		of   func(result) []float64
		unit string
		div  float64
	}{
		{"bulk upload", func(a result) []float64 { return a.bulk }, "GB/s", 1e9},
		{"4 KiB round trips", func(a result) []float64 { return a.rr }, "k/s", 1e3},
	} {
		off, on := w.of(arms[0]), w.of(arms[1])
		ratios := make([]float64, pairs)
		for i := range ratios {
			ratios[i] = on[i] / off[i]
		}
		med, lo, hi := stats.MedianCI(ratios, 0.99)
		t.Logf("%s: none %.3f %s, daemon %.3f %s (medians); daemon/none median %.4f, 99 %% interval %.4f–%.4f over %d ABBA pairs",
			w.name, stats.Median(off)/w.div, w.unit, stats.Median(on)/w.div, w.unit, med, lo, hi, pairs)
	}
	sum := func(xs []float64) (s float64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	with := func(xs []float64) (n int) {
		for _, x := range xs {
			if x > 0 {
				n++
			}
		}
		return n
	}
	for a, name := range []string{"none", "daemon"} {
		t.Logf("%s: %0.f retransmitted segments (%d of %d arms had any), %0.f DSACKs received, in the bulk uploads",
			name, sum(arms[a].retrans), with(arms[a].retrans), pairs, sum(arms[a].dsack))
	}
	if sum(arms[1].retrans) > 0 && sum(arms[0].retrans) == 0 && with(arms[1].retrans) > pairs/4 {
		t.Errorf("the daemon arm retransmitted in %d of %d arms, the arm without none", with(arms[1].retrans), pairs)
	}
}

// idleArms returns how an arm begins: with the daemon (true) or without,
// and a stop for its end. switchBy "" starts a daemon for each daemon
// arm and stops it after; "stop" starts one now, for the whole test, and
// holds it stopped (SIGSTOP) through every arm without it.
func (l *lab) idleArms(t *testing.T, bin, switchBy string) func(daemon bool) (stop func()) {
	switch switchBy {
	case "":
		return func(daemon bool) func() {
			if !daemon {
				return func() {}
			}
			return l.idleDaemon(t, bin)
		}
	case "stop":
		stopAll, d := l.idleDaemonProc(t, bin)
		pid := d.cmd.Process
		t.Cleanup(func() { _ = pid.Signal(syscall.SIGCONT); stopAll() })
		return func(daemon bool) func() {
			if daemon {
				_ = pid.Signal(syscall.SIGCONT)
				time.Sleep(100 * time.Millisecond) // a tick: it is running again
				return func() {}
			}
			_ = pid.Signal(syscall.SIGSTOP)
			return func() { _ = pid.Signal(syscall.SIGCONT) }
		}
	}
	t.Fatalf("SANQOS_IDLE_SWITCH=%q: want stop, or nothing for a daemon per arm", switchBy)
	return nil
}

// idleDaemon runs `sanqos run` in the target namespace knowing the
// client as a consumer, throttling nobody, until the returned stop.
func (l *lab) idleDaemon(t *testing.T, bin string) (stop func()) {
	t.Helper()
	stop, _ = l.idleDaemonProc(t, bin)
	return stop
}

// idleDaemonProc is idleDaemon, and the daemon's process.
func (l *lab) idleDaemonProc(t *testing.T, bin string) (stop func(), d *daemon) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "ctl.sock")
	d = l.startDaemonArgs(t, nil, sock, append([]string{bin, "run",
		"--consumer", "tt," + clientIP + ",loop0", "--controller", "none", "--attribution", "wire",
		"--ports", strconv.Itoa(iscsi), "--listen", "", "--socket", sock}, strings.Fields(os.Getenv("SANQOS_IDLE_ARGS"))...))
	time.Sleep(300 * time.Millisecond) // a few ticks: the wire counters read
	var once bool
	return func() {
		if once {
			return
		}
		once = true
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		if err := <-d.done; err != nil {
			t.Errorf("the daemon: %v\n%s", err, d.stderr)
		}
	}, d
}

// roundTrips runs request/response exchanges of size bytes each way on
// an echo connection for d and returns them per second.
func (l *lab) roundTrips(size int, d time.Duration) float64 {
	c := l.dial('e')
	defer c.Close()
	buf := make([]byte, size)
	n := 0
	start := time.Now()
	for time.Since(start) < d {
		if _, err := c.Write(buf); err != nil {
			l.t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			l.t.Fatal(err)
		}
		n++
	}
	return float64(n) / time.Since(start).Seconds()
}
