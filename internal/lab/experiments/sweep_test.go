package experiments

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWelch against R: t.test(c(2,4,6,8,10), c(1,2,3,4,5), conf.level=0.99)
// gives t = 1.8974, df = 5.8824, p-value = 0.1075, and its interval
// contains 0.
func TestWelch(t *testing.T) {
	w := welch("a", "b", []float64{1, 2, 3, 4, 5}, []float64{2, 4, 6, 8, 10}, 0.99)
	near := func(got, want, tol float64) bool { return math.Abs(got-want) <= tol }
	if !near(w.T, 1.8974, 1e-3) || !near(w.DF, 5.8824, 1e-3) || !near(w.P, 0.1075, 2e-3) {
		t.Errorf("t %.4f df %.4f p %.4f, want 1.8974 5.8824 0.1075", w.T, w.DF, w.P)
	}
	if w.DiffS != 3 || !near(w.DiffPct, 100, 1e-9) || w.Distinguishable || !(w.CILowS < 0 && w.CIHighS > 6) {
		t.Errorf("diff %v (%v %%), CI %v..%v, distinguishable %v", w.DiffS, w.DiffPct, w.CILowS, w.CIHighS, w.Distinguishable)
	}
	if !near(w.CILowS+w.CIHighS, 2*w.DiffS, 1e-9) {
		t.Errorf("CI %v..%v is not centred on %v", w.CILowS, w.CIHighS, w.DiffS)
	}
	far := welch("a", "b", []float64{10, 10.1, 9.9, 10, 10.05}, []float64{11, 11.1, 10.9, 11, 11.05}, 0.99)
	if !far.Distinguishable || !(far.CILowPct > 8 && far.CIHighPct < 12) {
		t.Errorf("a 10 %% difference with little noise: %+v", far)
	}
	if one := welch("a", "b", []float64{1}, []float64{2, 3}, 0.99); !math.IsNaN(one.P) || one.Distinguishable {
		t.Errorf("one sample: %+v, want no test", one)
	}
}

func TestJudgeSweep(t *testing.T) {
	mk := func(times ...[]float64) *SweepResult {
		r := &SweepResult{}
		for i, ts := range times {
			r.Steps = append(r.Steps, step(Condition{Label: "d", Daemon: true, DelayMs: float64(i) * 1.6}, ts, 200<<20))
		}
		r.judge()
		return r
	}
	if r := mk([]float64{9, 9.1, 8.9}, []float64{14, 14.2, 13.8}, []float64{20, 20.1, 19.9}); !r.Monotonic || !r.Separated {
		t.Errorf("rising, separated steps judged monotonic %v separated %v", r.Monotonic, r.Separated)
	}
	if r := mk([]float64{9, 9.1, 8.9}, []float64{8.8, 8.9, 8.7}); r.Monotonic {
		t.Error("a step that got faster judged monotonic")
	}
	if r := mk([]float64{9, 12, 6}, []float64{9.5, 13, 6}); !r.Monotonic || r.Separated {
		t.Errorf("rising within the noise judged monotonic %v separated %v", r.Monotonic, r.Separated)
	}
	s := step(Condition{}, []float64{2, 4}, 200e6)
	if s.MeanS != 3 || s.SES != 1 || s.MBs != 66.667 {
		t.Errorf("step %+v: want mean 3 s, standard error 1 s, 66.667 MB/s", s)
	}
}

func TestSweepPlans(t *testing.T) {
	for _, name := range []string{"fig5.5", "fig5.6", "overhead"} {
		x, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, short := range []bool{false, true} {
			sw := x.sweep(short)
			if sw.Repeats < 2 || len(sw.Conditions) < 2 || sizeBytes(sw.Size) <= 0 || sw.estimate <= 0 {
				t.Errorf("%s short %v: %+v", name, short, sw)
			}
			if !short && sw.Repeats < 20 {
				t.Errorf("%s: %d repeats, the thesis's are 20", name, sw.Repeats)
			}
			if x.Estimate(short) < sw.estimate || len(x.RunNames(short)) != 0 {
				t.Errorf("%s: estimate %v, runs %v", name, x.Estimate(short), x.RunNames(short))
			}
		}
		if _, err := x.selected(Options{Runs: []string{"none"}}); err == nil || !strings.Contains(err.Error(), "no runs to choose") {
			t.Errorf("%s with --runs: %v", name, err)
		}
	}
	full, _ := Lookup("fig5.5")
	sw := full.sweep(false)
	if sw.Size != "200m" || sw.Conditions[0].DelayMs != 0 || sw.Conditions[len(sw.Conditions)-1].DelayMs != 9.6 {
		t.Errorf("fig5.5 is not 200 MB at 0 to 9.6 ms: %+v", sw)
	}
	oh, _ := Lookup("overhead")
	if o := oh.sweep(false); len(o.Compare) != 4 || oh.profile != "ram" {
		t.Errorf("overhead compares %v on %q", o.Compare, oh.profile)
	}
}

func TestTransferArgs(t *testing.T) {
	sw := Sweep{Job: "seqread-32k", BS: "64k", Size: "200m"}
	got := strings.Join(transferArgs(sw, Condition{}), " ")
	if got != "--job seqread-32k --size 200m --name transfer --bs 64k" {
		t.Errorf("args %q", got)
	}
	if got := strings.Join(transferArgs(sw, Condition{Job: "seqwrite-64k"}), " "); !strings.Contains(got, "--job seqwrite-64k") {
		t.Errorf("the condition's job is not used: %q", got)
	}
	for s, want := range map[string]int64{"200m": 200 << 20, "64k": 64 << 10, "1g": 1 << 30, "4096": 4096, "lots": 0} {
		if got := sizeBytes(s); got != want {
			t.Errorf("sizeBytes(%q) = %d, want %d", s, got, want)
		}
	}
	for s, want := range map[string]string{"200m": "200 MiB", "64k": "64 KiB", "1g": "1 GiB", "4096": "4096", "lots": "lots", "m": "m", "": ""} {
		if got := sizeLabel(s); got != want {
			t.Errorf("sizeLabel(%q) = %q, want %q", s, got, want)
		}
	}
}

func TestPlotSweep(t *testing.T) {
	for _, compare := range []bool{false, true} {
		dir := t.TempDir()
		r := &SweepResult{Sweep: Sweep{Size: "16m", Repeats: 2}}
		for i, d := range []float64{0, 9.6} {
			r.Steps = append(r.Steps, step(Condition{Label: "c" + string(rune('0'+i)), Daemon: true, DelayMs: d}, []float64{1 + d/3, 1.1 + d/3}, 16<<20))
		}
		if compare {
			r.Compare = [][2]string{{"c0", "c1"}}
		}
		s := &Summary{Experiment: "fig5.5", Title: "t", Sweep: r, out: dir}
		files, err := plotSweep(s, nil)
		if err != nil || len(files) != 1 {
			t.Fatalf("compare %v: %v %v", compare, files, err)
		}
		if fi, err := os.Stat(filepath.Join(dir, files[0])); err != nil || fi.Size() < 10000 {
			t.Errorf("compare %v: plot %v %v", compare, fi, err)
		}
	}
	_ = time.Second
}

// TestReportShowsSweepAndSchedule: the report renders a sweep's table
// and Welch comparisons and a run's schedule windows.
func TestReportShowsSweepAndSchedule(t *testing.T) {
	r := &SweepResult{Sweep: Sweep{Host: "b2", Size: "64m", Repeats: 2, Compare: [][2]string{{"read: nothing", "read: sanqos idle"}}}}
	r.Steps = []SweepStep{step(Condition{Label: "read: nothing"}, []float64{1, 1.1}, 64<<20), step(Condition{Label: "read: sanqos idle", Daemon: true}, []float64{1.05, 1.1}, 64<<20)}
	r.judge()
	run := &RunResult{Name: "run1", Dir: "/x/run1", ScheduleEffects: []Effect{{Host: "b3", SetAtS: 10.2, SpanS: 10, BeforeMBs: 9, DuringMBs: 2,
		Others: []string{"b4", "b5"}, OthersBeforeMBs: 18, OthersDuringMBs: 20.5, OthersRiseSE: 0.25, DropAfterSeconds: 0.4}}}
	s := &Summary{Experiment: "overhead", Sweep: r, Runs: []*RunResult{run}}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := WriteHTML(path, s, ""); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<h2>Transfers</h2>", "read: sanqos idle", "Welch", "the schedule", "<td>b3</td><td>10.2</td><td>10.0</td><td>9.0</td><td>2.0</td><td>b4, b5</td><td>18.0</td><td>20.5</td><td>2.50 ± 0.25</td><td>0.4</td>"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestSweepLeft: a delay sweep's later steps take longer, so the estimate
// follows the line through the steps reached, not their average.
func TestSweepLeft(t *testing.T) {
	delays := Sweep{Repeats: 2, estimate: time.Hour, Conditions: []Condition{
		{Label: "0 ms", Daemon: true}, {Label: "2 ms", Daemon: true, DelayMs: 2},
		{Label: "4 ms", Daemon: true, DelayMs: 4}, {Label: "8 ms", Daemon: true, DelayMs: 8},
	}}
	jobs := Sweep{Repeats: 2, Conditions: []Condition{
		{Label: "read", Job: "r"}, {Label: "read idle", Job: "r", Daemon: true},
		{Label: "write", Job: "w"}, {Label: "write idle", Job: "w", Daemon: true},
	}}
	for _, tc := range []struct {
		name  string
		sw    Sweep
		times [][]float64
		want  float64 // seconds
	}{
		{"nothing yet: the plan's estimate", delays, nil, 3600},
		// one delay reached: only the average to go by
		{"first step", delays, [][]float64{{10}}, 7 * 10},
		// 10 s at 0 ms, 14 s at 2 ms: 4 s more per 2 ms; 2 ms's second
		// transfer, then 18 s twice at 4 ms and 26 s twice at 8 ms
		{"line through two steps", delays, [][]float64{{10, 10}, {14}}, 14 + 2*18 + 2*26},
		// a slower second step's part-mean counts for its own transfers
		{"done", delays, [][]float64{{10, 10}, {14, 14}, {18, 18}, {26, 26}}, 0},
		// the line never predicts less than the fastest step reached
		{"falling times floor at the fastest", delays, [][]float64{{20, 20}, {10, 10}}, 2*10 + 2*10},
		// every condition at delay 0: no line, the average of all so far
		{"same delay everywhere", jobs, [][]float64{{4, 6}, {5}}, 5 + 4*5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sweepLeft(tc.sw, tc.times).Seconds()
			if math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("sweepLeft = %.3f s, want %.3f s", got, tc.want)
			}
		})
	}
}
