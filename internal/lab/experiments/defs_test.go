package experiments

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

// TestHarderWorkloadPlans: randw, lull, surge24, guarantees and
// guarantees-ssd run 300 s each
// in full and shorter with --short, with the workloads the issue asks.
func TestHarderWorkloadPlans(t *testing.T) {
	for _, c := range []struct {
		name      string
		runs      []string
		job       string
		writers   int
		fullTotal time.Duration
	}{
		{"randw", []string{"none", "pid-15ms"}, "randwrite-8k", 24, 300 * time.Second},
		{"lull", []string{"none", "pid-15ms"}, "", 12, 300 * time.Second},
		{"surge24", []string{"none", "pid-15ms"}, "seqwrite-64k", 24, 300 * time.Second},
		{"guarantees", []string{"readers-none", "readers-pid-15ms", "writer1-none", "writer1-pid-15ms"}, "", -1, 300 * time.Second},
		{"guarantees-ssd", []string{"fast-ssd-none", "fast-ssd-pid-1.16ms"}, "", 12, 300 * time.Second},
	} {
		x, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if got := x.RunNames(false); !reflect.DeepEqual(got, c.runs) {
			t.Errorf("%s runs %v, want %v", c.name, got, c.runs)
		}
		for _, r := range x.plan(false) {
			if r.w.Total != c.fullTotal {
				t.Errorf("%s/%s lasts %s, want %s", c.name, r.name, r.w.Total, c.fullTotal)
			}
			if c.writers >= 0 && (r.w.Writers != c.writers || r.w.WriterJob != c.job || r.w.On == "") {
				t.Errorf("%s/%s workload %+v", c.name, r.name, r.w)
			}
			// lull's pauses are long, yet within the time the loop
			// holds its delay for the writers' return.
			if c.name == "lull" && (r.w.Off != lullOff || r.w.Off <= 5*burstOff || r.w.Off >= control.ArmHold) {
				t.Errorf("lull/%s pauses %s, want %s: longer than fig5.11's, shorter than control.ArmHold %s", r.name, r.w.Off, lullOff, control.ArmHold)
			}
		}
		for _, r := range x.plan(true) {
			if r.w.Total >= c.fullTotal {
				t.Errorf("%s --short: %s lasts %s", c.name, r.name, r.w.Total)
			}
		}
	}
	// longlull's pauses are past the time the loop holds its delay, and
	// even --short has three bursts.
	x, err := Lookup("longlull")
	if err != nil {
		t.Fatal(err)
	}
	for _, short := range []bool{false, true} {
		for _, r := range x.plan(short) {
			w := r.w
			if w.Off <= control.ArmHold || w.Writers != 12 || w.On != burstBytes {
				t.Errorf("longlull/%s: workload %+v, want fig5.11's writers pausing past control.ArmHold %s", r.name, w, control.ArmHold)
			}
			if bursts := int((w.WriterTime + w.Off) / (w.Off + 20*time.Second)); bursts < 3 {
				t.Errorf("longlull/%s (short %v): room for %d bursts of about 20 s in %s, want 3", r.name, short, bursts, w.WriterTime)
			}
		}
	}
	x, _ = Lookup("guarantees")
	p := x.plan(false)
	if p[0].w.Readers != 4 || p[0].w.Writers != 0 || p[2].w.Writers != 1 || p[2].w.On != "" || p[2].w.Name != p[3].w.Name {
		t.Errorf("guarantees workloads: %+v", p)
	}
}

// TestWriterArgs: continuous writers run their whole WriterTime, over
// their region again if they get to its end; on/off writers keep their
// bursts. The arguments must parse as the load generator's job.
func TestWriterArgs(t *testing.T) {
	cases := []struct {
		name      string
		w         Workload
		timeBased bool
		onBytes   int64
		depth     int
		fsync     int
	}{
		{"continuous (fig5.8: 1 GiB a thread, 440 s)", Workload{WriterTime: 440 * time.Second, Writers: 12}, true, 0, 1, 0},
		{"bursts", Workload{WriterTime: 280 * time.Second, Writers: 12, On: "64m", Off: 5 * time.Second}, false, 64 << 20, 1, 0},
		{"random writers", Workload{WriterTime: 280 * time.Second, Writers: 24, WriterJob: "randwrite-8k"}, true, 0, 1, 0},
		{"deep queues (deepq)", Workload{WriterTime: 70 * time.Second, Writers: 3, WriterJob: "randwrite-16k", WriterDepth: 32}, true, 0, 32, 0},
		{"flushing (nfsfsync)", Workload{WriterTime: 70 * time.Second, Writers: 12, On: "32m", Off: 5 * time.Second, WriterFsync: 64}, false, 32 << 20, 1, 64},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
			f := loadspec.BindFlags(fs)
			perThread := fs.Bool("per-thread", false, "")
			if err := fs.Parse(writerArgs(c.w, "b3", 4, 1024)); err != nil {
				t.Fatal(err)
			}
			j, err := f.Job()
			if err != nil {
				t.Fatal(err)
			}
			if j.Depth() != c.depth || j.Fsync != c.fsync {
				t.Errorf("job %+v: want iodepth %d, fsync %d", j, c.depth, c.fsync)
			}
			if j.TimeBased != c.timeBased || j.OnSize != c.onBytes || j.Runtime != c.w.WriterTime || j.Size != 1024<<20 || j.Threads != 4 || !*perThread {
				t.Errorf("job %+v (per-thread %v): want time-based %v, on %d, runtime %v, 1 GiB, 4 threads, per thread",
					j, *perThread, c.timeBased, c.onBytes, c.w.WriterTime)
			}
		})
	}
}

// The untuned experiments run uncontrolled, every fixed delay of their
// sweep and pid at their threshold (15 ms, capped's 3 ms) on one
// workload, and the analysis judges pid against the smallest fixed delay
// that meets it with the share.
func TestUntunedPlansAndChecks(t *testing.T) {
	for _, e := range untunedExperiments() {
		runs := e.plan(true)
		pid := fmt.Sprintf("pid-%gms", e.refMs)
		if runs[0].name != "none" || runs[len(runs)-1].name != pid || len(runs) < 4 {
			t.Fatalf("%s: runs %v, want none first and %s last", e.Name, runs, pid)
		}
		if !untunedNames[e.Name] {
			t.Errorf("%s: not judged by untunedChecks", e.Name)
		}
		for _, r := range runs[1:] {
			if r.w != runs[0].w {
				t.Errorf("%s: %s runs another workload than none", e.Name, r.name)
			}
		}
	}
	th := 15.0
	run := func(name string, fixed, p95, over, mbs float64, ctl bool) *RunResult {
		r := &RunResult{Name: name, FixedDelayMs: fixed, WriteMBs: mbs, OverThresholdPct: over}
		r.WaitMs.P95 = p95
		if ctl {
			r.ThresholdMs = &th
		}
		return r
	}
	for _, tc := range []struct {
		name                 string
		pidP95, pidOver, mbs float64
		pass                 bool
	}{
		{"holds at 92 % of the static rate", 15.5, 1.5, 9.2, true},
		{"p95 over 1.1 × T", 17, 1.5, 9.2, false},
		{"too many seconds over", 15.5, 3, 9.2, false},
		{"under 90 % of the static rate", 15.5, 1.5, 8.5, false},
	} {
		s := &Summary{Experiment: "deepq", Runs: []*RunResult{
			run("none", 0, 60, 80, 20, false), run("fixed-50ms", 50, 20, 30, 14, false),
			run("fixed-100ms", 100, 14, 0, 10, false), run("pid-15ms", 0, tc.pidP95, tc.pidOver, tc.mbs, true),
		}}
		analyzeUntuned(s)
		var failed []string
		for _, c := range append(untunedChecks(s), frontierChecks(s.Frontier)...) {
			if !c.OK {
				failed = append(failed, c.What)
			}
		}
		if (len(failed) == 0) != tc.pass {
			t.Errorf("%s: failed checks %v, want pass %v", tc.name, failed, tc.pass)
		}
	}
}

// TestWithThreshold: --threshold gives every controlled run the new
// promise and its name, judges uncontrolled runs by it, and leaves fixed
// delays and the experiment itself alone.
func TestWithThreshold(t *testing.T) {
	x, err := Lookup("deepq")
	if err != nil {
		t.Fatal(err)
	}
	y := x.WithThreshold(0.6)
	if got, want := y.RunNames(false), []string{"none", "fixed-50ms", "fixed-100ms", "fixed-200ms", "fixed-400ms", "pid-0.6ms"}; !reflect.DeepEqual(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
	for _, r := range y.plan(false) {
		if r.c.Controller == "pid" && r.c.ThresholdMs != 0.6 {
			t.Errorf("%s: threshold %g", r.name, r.c.ThresholdMs)
		}
		if r.c.FixedDelayMs > 0 && r.c.ThresholdMs != 0 {
			t.Errorf("%s: a fixed delay got threshold %g", r.name, r.c.ThresholdMs)
		}
	}
	if y.refMs != 0.6 || x.refMs == 0.6 {
		t.Errorf("reference %g (was %g)", y.refMs, x.refMs)
	}
	if got := x.RunNames(false); got[len(got)-1] != "pid-15ms" {
		t.Errorf("the experiment itself changed: %v", got)
	}
	if z := x.WithThreshold(0); !reflect.DeepEqual(z.RunNames(true), x.RunNames(true)) || z.refMs != x.refMs {
		t.Errorf("threshold 0 changed the experiment")
	}
}

// TestWithRulesOff: the runs under pid get the rules off and a name that
// says so; uncontrolled and fixed-delay runs, and the experiment itself,
// are unchanged; the daemon's configuration carries pid.rules_off.
func TestWithRulesOff(t *testing.T) {
	x, err := Lookup("fig5.11")
	if err != nil {
		t.Fatal(err)
	}
	y := x.WithRulesOff([]string{"armed", "gain"})
	if got, want := y.RunNames(false), []string{"none", "pid-20ms-no-armed-no-gain", "pid-15ms-no-armed-no-gain", "pid-10ms-no-armed-no-gain", "thesis-15ms"}; !reflect.DeepEqual(got, want) {
		t.Errorf("runs %v, want %v", got, want)
	}
	for _, r := range y.plan(true) {
		if off := r.c.RulesOff; (r.c.Controller == "pid") != (len(off) == 2) {
			t.Errorf("%s (%s): rules off %v", r.name, r.c.Controller, off)
		}
		if r.c.Controller == "pid" {
			cfg := daemonConfig(r.c, Gains{}, labView{port: 3260}, "/tmp/rec")
			if !strings.Contains(cfg, `rules_off = ["armed", "gain"]`) {
				t.Errorf("%s: the daemon's configuration lacks the rules off:\n%s", r.name, cfg)
			}
		}
	}
	if got := x.RunNames(true); !slices.Contains(got, "pid-15ms") {
		t.Errorf("the experiment itself changed: %v", got)
	}
	if z := x.WithRulesOff(nil); !reflect.DeepEqual(z.RunNames(true), x.RunNames(true)) {
		t.Errorf("no rules off changed the experiment")
	}
	// Runs named without their label still say which rules were off.
	tn, err := Lookup("tenants")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tn.WithRulesOff([]string{"retarget"}).RunNames(true), []string{"shares-1-2-4-no-retarget", "reserve-cap-no-retarget", "readers-10-20ms-no-retarget"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tenants runs %v, want %v", got, want)
	}
}
