package experiments

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
)

// buildBinaries builds sanqos (the daemon) and sanqos-iscsiload (the load
// generator) into dir, as 'make build' does.
func buildBinaries(t *testing.T, dir string) (sanqos, loadgen string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	sanqos, loadgen = filepath.Join(dir, "sanqos"), filepath.Join(dir, lab.LoadgenName)
	for _, b := range []struct{ out, pkg string }{{sanqos, "./cmd/sanqos"}, {loadgen, "./cmd/sanqos-iscsiload"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b.pkg, err, out)
		}
	}
	return sanqos, loadgen
}

// needLab skips t unless it can bring the lab up (root, the lab's
// tools) and the run is not -short: it takes about long.
func needLab(t *testing.T, long string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds the lab (namespaces, loop devices, tgtd) and runs the daemon's nfqueue backend")
	}
	for _, tool := range []string{"tgtd", "tgtadm", "nstat", "iptables", "ipset", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps): %v", tool, err)
		}
	}
	if testing.Short() {
		t.Skipf("takes about %s; not in -short", long)
	}
}

// TestControlledEndToEnd is the controlled experiment in short: smalljob
// on b2 against 12 on/off sequential writers on b3-b5, once with the daemon
// only observing and once with pid at 15 ms. It checks what sanqos
// promises: the controlled p95 wait stays under 1.3 × threshold where the
// uncontrolled one is over 2 ×, no data is lost or timed out in the
// controlled run, and nothing is throttled 2 s after the writers stop;
// and the source reports' guarantees hold in the controlled run: per burst
// Jain's index over the writers ≥ 0.9, no writer thread waiting over 1 s
// for an I/O, no RTO and every retransmission a DSACKed probe, the
// writers' 100 ms throughput no burstier than 1.5 × uncontrolled.
// About 12 minutes, as root: the window is fig5.11's full 300 s, because
// a writer burst lasts about 14 s and its first second or two overshoot
// while the writers' queue drains, so over a shorter window the p95 is
// little more than the peaks of four or five burst starts.
//
// On this kernel (HZ=250, veth RTTs of 50 µs) a writer's tail loss probe
// timer can fire a jiffy early, and the writers send a few spurious probes
// even uncontrolled, so the test cannot demand zero retransmissions; it
// demands that every one of them was a probe the receiver reported as a
// duplicate (DSACK), with no RTO and nothing resent by the target. The
// report still counts them against the goal of zero.
func TestControlledEndToEnd(t *testing.T) {
	needLab(t, "12 minutes")
	bin := t.TempDir()
	sanqos, loadgen := buildBinaries(t, bin)
	// SANQOS_E2E_OUT keeps the logs, plots and report for a look.
	out := os.Getenv("SANQOS_E2E_OUT")
	if out == "" {
		out = t.TempDir()
	}
	// Ctrl-C or SIGTERM still takes the lab down.
	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sctx, 25*time.Minute)
	defer cancel()

	const th = 15.0
	x := Custom("e2e", th, Interference(300*time.Second), []Control{
		{Controller: "none"},
		{Controller: "pid", ThresholdMs: th},
	})
	var s *Summary
	err := WithLab(ctx, Options{Out: out, Sanqos: sanqos, Progress: testWriter{t}},
		lab.Options{Loadgen: loadgen, Size: 4 << 30, Progress: testWriter{t}}, func(l *lab.Lab) error {
			var err error
			s, err = x.RunOn(ctx, l, Options{Out: out, Sanqos: sanqos, Progress: testWriter{t}})
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	none, pid := s.Runs[0], s.Runs[1]
	for _, r := range s.Runs {
		t.Logf("%s: wait %+v over %.1f%%, write %.1f MB/s, reader %.1f kB/s, retrans %v (loss probes %v, RTOs %v), jain %.2f, max write %.0f ms, delay %+v, release %+v",
			r.Name, r.WaitMs, r.OverThresholdPct, r.WriteMBs, r.ReaderKBs, r.RetransmitsBy, r.LossProbesBy, r.RTOsBy, r.Jain, r.MaxWriteIOMs, r.Delay, r.Release)
	}
	if none.ActiveSeconds < 30 || pid.ActiveSeconds < 30 {
		t.Fatalf("too few seconds with writers active (none %d, pid %d): the workload did not run", none.ActiveSeconds, pid.ActiveSeconds)
	}
	if none.WaitMs.P95 <= 2*th {
		t.Errorf("uncontrolled p95 wait %.1f ms is not over 2 × %g ms: the lab does not interfere enough to judge control", none.WaitMs.P95, th)
	}
	if pid.WaitMs.P95 >= 1.3*th {
		t.Errorf("controlled p95 wait %.1f ms, want < %.1f ms (1.3 × threshold)", pid.WaitMs.P95, 1.3*th)
	}
	// Retransmissions. Delaying never drops, so whatever was resent in the
	// controlled run must have arrived the first time: every retransmitted
	// segment reported back as a duplicate (DSACK), and no retransmission
	// timeout. The count itself is reported, not asserted: on this kernel
	// (HZ=250, veth RTTs of ~50 µs) the probe timer fires up to 4 ms early
	// and the uncontrolled run sends a few spurious tail loss probes too.
	for ns, n := range pid.RetransmitsBy {
		if rto := pid.RTOsBy[ns]; rto != 0 {
			t.Errorf("%s: %d retransmission timeouts in the controlled run", ns, rto)
		}
		if d := pid.DSACKsBy[ns]; d < n {
			t.Errorf("%s: %d segments retransmitted, only %d reported as duplicates (DSACK): data was lost", ns, n, d)
		}
	}
	if t.Failed() {
		b, err := os.ReadFile(filepath.Join(out, pid.Name, "tcp-counters.json"))
		t.Logf("TCP counters of the controlled run (%v):\n%s", err, b)
	}
	t.Logf("retransmitted segments: uncontrolled %d, controlled %d (loss probes %v, all reported as duplicates)", none.Retransmits, pid.Retransmits, pid.LossProbesBy)
	// The once-a-second sampler read every initiator's counters through
	// its load generator, and what it placed in time is no more than
	// was counted.
	for _, r := range s.Runs {
		checkSamples(t, r)
		t.Logf("%s: steal %.0f ms, retransmissions in time: %s", r.Name, r.StealMs, describeEvents(r.RetransmitEvents))
	}
	if pid.Release == nil || pid.Release.Stops == 0 {
		t.Fatalf("the record shows no stop of the writers to judge the release on: %+v", pid.Release)
	}
	if !pid.Release.WithinLimit {
		t.Errorf("throttle lingered after the writers stopped: %+v", pid.Release.Events)
	}
	// The source reports' guarantees (issue 12): fair and bounded among
	// the throttled, paced and never lost. Each is a Check in the summary;
	// the test fails on any the controlled run missed and logs the rest.
	if pid.Guarantees == nil || len(pid.Guarantees.BurstJain) == 0 {
		t.Errorf("the controlled run has no per-burst guarantees to judge: %+v", pid.Guarantees)
	}
	for _, c := range s.Checks {
		if c.Run != pid.Name {
			continue
		}
		for _, g := range []string{"Jain's index", "longest wait of a writer", "nothing lost", "100 ms throughput CV"} {
			if strings.Contains(c.What, g) && !c.OK {
				t.Errorf("guarantee missed: %s: want %s, got %s", c.What, c.Want, c.Got)
			}
		}
		t.Logf("check %s: %s: want %s, got %s (ok %v)", c.Run, c.What, c.Want, c.Got, c.OK)
	}
	if pid.Bursts != nil && none.Bursts != nil {
		t.Logf("bursts: pid %s; uncontrolled %s", pid.Bursts.Line(), none.Bursts.Line())
	}
	if pid.Delay == nil || pid.Delay.Max == 0 {
		t.Errorf("the controlled run never delayed a packet (%+v): the comparison proves nothing", pid.Delay)
	}
}

// checkSamples reads a run's tcp-samples.jsonl: the middle sample must
// have every initiator, and the events no more segments than the run's
// count.
func checkSamples(t *testing.T, r *RunResult) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.Dir, "tcp-samples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var samples []tcpSample
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s tcpSample
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%s: tcp-samples.jsonl: %v", r.Name, err)
		}
		samples = append(samples, s)
	}
	if len(samples) < r.ActiveSeconds {
		t.Fatalf("%s: %d samples for %d active seconds", r.Name, len(samples), r.ActiveSeconds)
	}
	if mid := samples[len(samples)/2]; len(mid.Retrans) != 4 {
		t.Errorf("%s: sample at %.0f s has the counters of %v, want the 4 initiators", r.Name, mid.T, mid.Retrans)
	}
	var n uint64
	for _, e := range r.RetransmitEvents {
		n += e.Segments
	}
	if int64(n) > r.Retransmits {
		t.Errorf("%s: events place %d segments in time, but the run counted %d", r.Name, n, r.Retransmits)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
