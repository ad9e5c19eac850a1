package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

func TestAllNamesAreExperimentsWithThesisReferences(t *testing.T) {
	for _, n := range AllNames {
		if _, err := Lookup(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if thesisRef[n] == "" {
			t.Errorf("%s has no thesis reference for the index", n)
		}
	}
	for n, from := range derivedFrom {
		i, j := indexOf(AllNames, n), indexOf(AllNames, from)
		if i < 0 || j < 0 || j > i {
			t.Errorf("%s derives from %s, which must run before it", n, from)
		}
	}
	if AllEstimate(true) <= 0 || AllEstimate(false) <= AllEstimate(true) {
		t.Errorf("estimates short %v full %v", AllEstimate(true), AllEstimate(false))
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

func TestVerdict(t *testing.T) {
	ok := &Summary{Checks: []Check{{"r", "a", "x", "y", true}, {"r", "b", "x", "y", true}}}
	if v := verdict(ok); !strings.HasPrefix(v, "reproduced (2 of 2") {
		t.Errorf("all met: %q", v)
	}
	bad := &Summary{Checks: []Check{{"r", "a", "x", "y", true}, {"run1", "b", "< 3", "4", false}}}
	if v := verdict(bad); !strings.HasPrefix(v, "differs: 1 of 2") || !strings.Contains(v, "run1: b: want < 3, got 4") {
		t.Errorf("one missed: %q", v)
	}
	if v := verdict(&Summary{}); !strings.HasPrefix(v, "shown") {
		t.Errorf("no checks: %q", v)
	}
	// overhead: the idle daemon is the target; the delay class is only
	// reported, and where it differs the verdict says so.
	sw := &SweepResult{Steps: []SweepStep{
		{Condition: Condition{Label: "write: nothing"}},
		{Condition: Condition{Label: "write: sanqos idle", Daemon: true}},
		{Condition: Condition{Label: "write: 1 µs class", Daemon: true, DelayMs: 0.001}},
	}, Welch: []Welch{
		{A: "write: nothing", B: "write: sanqos idle", DiffPct: 8, Distinguishable: false},
		{A: "write: nothing", B: "write: 1 µs class", DiffPct: 52.6, CILowPct: 20.2, CIHighPct: 85, Distinguishable: true},
	}}
	tests := []struct {
		name        string
		worstDiffer bool
		want        string
	}{
		{"worst case distinguishable", true, "reproduced (1 of 1 targets met); differs where only reported (no target): write: 1 µs class vs write: nothing +52.6 % (99 %: +20.2 … +85.0)"},
		{"worst case within noise", false, "reproduced (1 of 1 targets met)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sw.Welch[1].Distinguishable = tt.worstDiffer
			s := &Summary{Sweep: sw, Checks: []Check{{"sweep", "idle", "0", "8", true}}}
			if v := verdict(s); v != tt.want {
				t.Errorf("verdict = %q\nwant      %q", v, tt.want)
			}
		})
	}
}

// TestDeriveAndIndex: fig4.3 is analysed from fig5.8's runs into its own
// directory, and the index names both with their verdicts and plots.
func TestDeriveAndIndex(t *testing.T) {
	dir := t.TempDir()
	tl := fig58Timeline()
	src := &Summary{Experiment: "fig5.8", Runs: []*RunResult{{Name: "delays", Dir: filepath.Join(dir, "fig5.8", "delays"), timeline: tl}}}
	x, _ := Lookup("fig4.3")
	s, err := x.derive(src, Options{Out: filepath.Join(dir, "fig4.3")})
	if err != nil {
		t.Fatal(err)
	}
	if s.Fig43 == nil || len(s.Plots) != 1 || src.Fig43 != nil || src.Experiment != "fig5.8" {
		t.Fatalf("derived %+v; the source must stay as it was", s)
	}
	for _, f := range []string{"summary.json", "report.html", "fig4.3.png"} {
		if _, err := os.Stat(filepath.Join(dir, "fig4.3", f)); err != nil {
			t.Error(err)
		}
	}
	idx := &Index{Entries: []IndexEntry{entryOf(x, s, nil, dir), entryOf(Experiment{Name: "fig5.9"}, nil, errors.New("lab busy"), dir)}}
	if e := idx.Entries[0]; e.Report != "fig4.3/report.html" || len(e.Plots) != 1 || e.Verdict == "" || !strings.Contains(e.Ours, "EWMA") {
		t.Errorf("entry %+v", e)
	}
	if err := writeIndex(dir, idx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil || !strings.Contains(string(b), `<a href="fig4.3/report.html">fig4.3</a>`) || !strings.Contains(string(b), "not run: lab busy") {
		t.Errorf("index.html: %v\n%s", err, b)
	}
	md := IndexMarkdown(idx)
	if !strings.Contains(md, "| fig4.3 | EWMA α = 0.15") || strings.Count(md, "\n") != 4 {
		t.Errorf("markdown:\n%s", md)
	}
}

// TestParseNames: "all" is the thesis's experiments; a list names
// experiments in the order given, each once.
func TestParseNames(t *testing.T) {
	if n, err := ParseNames("all"); err != nil || !slices.Equal(n, AllNames) {
		t.Errorf("all: %v %v", n, err)
	}
	if n, err := ParseNames("frontier, randw,surge24,guarantees"); err != nil || !slices.Equal(n, []string{"frontier", "randw", "surge24", "guarantees"}) {
		t.Errorf("list: %v %v", n, err)
	}
	for _, bad := range []string{"frontier,nosuch", "randw,randw", "frontier,,randw"} {
		if _, err := ParseNames(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// fig4.3 after fig5.8 analyses its run again and takes no time of
	// its own; alone, or before fig5.8, it runs.
	x43, _ := Lookup("fig4.3")
	x58, _ := Lookup("fig5.8")
	if d := Estimate([]string{"fig5.8", "fig4.3"}, false); d != x58.Estimate(false) {
		t.Errorf("fig5.8,fig4.3: %v, want fig5.8's %v", d, x58.Estimate(false))
	}
	if d := Estimate([]string{"fig4.3", "fig5.8"}, false); d != x43.Estimate(false)+x58.Estimate(false) {
		t.Errorf("fig4.3,fig5.8: %v", d)
	}
}

// TestRunAllOrderAndFailures: each experiment of the list gets its turn
// even when the ones before failed; fig4.3 derives from fig5.8 only when
// fig5.8 came before it, and says so when that did not complete. No lab
// is brought up: labFor refuses.
func TestRunAllOrderAndFailures(t *testing.T) {
	dir := t.TempDir()
	var progress strings.Builder
	var asked []string
	labFor := func(profile string) (lab.Options, error) {
		asked = append(asked, profile)
		return lab.Options{}, errors.New("no lab here")
	}
	idx, err := RunAll(context.Background(), []string{"fig5.8", "fig4.3", "randw"}, Options{Out: dir, Progress: &progress}, labFor)
	if err == nil || len(idx.Entries) != 3 || len(asked) != 2 {
		t.Fatalf("err %v, entries %+v, labs asked %v", err, idx.Entries, asked)
	}
	if e := idx.Entries[1]; !strings.Contains(e.Error, "fig5.8's run, which did not complete") {
		t.Errorf("fig4.3 after a failed fig5.8: %+v", e)
	}
	if !strings.Contains(progress.String(), "experiment 3/3 randw") || !slices.Equal(idx.Names, []string{"fig5.8", "fig4.3", "randw"}) {
		t.Errorf("progress %q, names %v", progress.String(), idx.Names)
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil || !strings.Contains(string(b), "sanqos lab run fig5.8,fig4.3,randw") || !strings.Contains(string(b), "not run: no lab here") {
		t.Errorf("index.html: %v\n%s", err, b)
	}
	// fig4.3 alone runs its own lab.
	asked = nil
	if _, err := RunAll(context.Background(), []string{"fig4.3"}, Options{Out: dir}, labFor); err == nil || len(asked) != 1 {
		t.Errorf("fig4.3 alone: err %v, labs asked %v", err, asked)
	}
}

// TestRunAllResume: with Resume, an experiment whose complete results
// are in its directory is kept and no lab comes up for it; incomplete,
// shortened or differently tuned results, and fig4.3's analysis of a
// fig5.8 that runs again, are run anew. labFor refuses, so every
// experiment not kept fails, and the test counts them.
// onDisk records in s the default lab's disk model, changed by edit.
func onDisk(s Summary, edit func(*diskmodel.Profile)) Summary {
	p, err := diskmodel.ProfileByName(lab.DefaultStorage.Profile)
	if err != nil {
		panic(err)
	}
	edit(&p)
	s.Lab.Disk = &p
	return s
}

func TestRunAllResume(t *testing.T) {
	start := time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)
	write := func(t *testing.T, dir string, s Summary) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, s.Experiment), 0o755); err != nil {
			t.Fatal(err)
		}
		if s.Gains == (Gains{}) {
			s.Gains = Gains{}.WithDefaults()
		}
		if err := writeJSON(filepath.Join(dir, s.Experiment, "summary.json"), &s); err != nil {
			t.Fatal(err)
		}
	}
	runs := func(names ...string) []*RunResult {
		var out []*RunResult
		for _, n := range names {
			out = append(out, &RunResult{Name: n})
		}
		return out
	}
	done := func(exp string, took time.Duration, r ...string) Summary {
		return Summary{Experiment: exp, Started: start, Finished: start.Add(took), Runs: runs(r...)}
	}
	cases := []struct {
		name     string
		names    []string
		write    []Summary
		wantKept []string
		wantLabs int
	}{
		{"complete results are kept", []string{"fig5.8", "fig4.3", "randw"},
			[]Summary{done("fig5.8", 8*time.Minute, "delays"), done("fig4.3", time.Second, "delays"), done("randw", 11*time.Minute, "none", "pid-15ms")},
			[]string{"fig5.8", "fig4.3", "randw"}, 0},
		{"a run missing, a short version, other gains: run again", []string{"randw", "fig5.1", "surge24"},
			[]Summary{done("randw", time.Minute, "none"), func() Summary { s := done("fig5.1", time.Minute, "readers"); s.Short = true; return s }(),
				func() Summary {
					s := done("surge24", time.Minute, "none", "pid-15ms")
					s.Gains = Gains{Kp: 9}.WithDefaults()
					return s
				}()},
			nil, 3},
		{"a stopped experiment left no summary", []string{"fig5.1"}, nil, nil, 1},
		{"fig4.3 is not kept when fig5.8 runs again", []string{"fig5.8", "fig4.3"},
			[]Summary{done("fig4.3", time.Second, "delays")}, nil, 1},
		{"fig4.3 runs its own lab when fig5.8 is kept without it", []string{"fig5.8", "fig4.3"},
			[]Summary{done("fig5.8", 8*time.Minute, "delays")}, []string{"fig5.8"}, 1},
		{"a sweep without its steps is run again", []string{"fig5.6"},
			[]Summary{done("fig5.6", time.Hour)}, nil, 1},
		{"measured on today's disk model: kept", []string{"fig5.1"},
			[]Summary{onDisk(done("fig5.1", time.Minute, "readers"), func(*diskmodel.Profile) {})}, []string{"fig5.1"}, 0},
		{"measured on another disk model: run again", []string{"fig5.1"},
			[]Summary{onDisk(done("fig5.1", time.Minute, "readers"), func(p *diskmodel.Profile) { p.ReadAheadBytes = 0 })}, nil, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, s := range c.write {
				write(t, dir, s)
			}
			labs := 0
			labFor := func(string) (lab.Options, error) { labs++; return lab.Options{}, errors.New("no lab here") }
			var progress strings.Builder
			idx, err := RunAll(context.Background(), c.names, Options{Out: dir, Resume: true, Progress: &progress}, labFor)
			var kept []string
			var took time.Duration
			for _, e := range idx.Entries {
				if e.Kept {
					kept = append(kept, e.Name)
					took += e.Took
				}
			}
			if !slices.Equal(kept, c.wantKept) || labs != c.wantLabs || (err == nil) != (c.wantLabs == 0) {
				t.Fatalf("kept %v, labs %d, err %v; want kept %v, labs %d\n%s", kept, labs, err, c.wantKept, c.wantLabs, progress.String())
			}
			if idx.Kept() != len(kept) || idx.Took() < took {
				t.Errorf("index: %d kept, took %v; entries' kept time %v", idx.Kept(), idx.Took(), took)
			}
			b, err := os.ReadFile(filepath.Join(dir, "index.html"))
			if err != nil {
				t.Fatal(err)
			}
			if len(kept) > 0 && (!strings.Contains(string(b), "kept from an earlier run") || !strings.Contains(progress.String(), kept[0]+" kept")) {
				t.Errorf("index.html or progress does not say what was kept:\n%s\n%s", b, progress.String())
			}
		})
	}
	// Without Resume, complete results are run again.
	dir := t.TempDir()
	write(t, dir, done("fig5.1", time.Minute, "readers"))
	labs := 0
	if _, err := RunAll(context.Background(), []string{"fig5.1"}, Options{Out: dir}, func(string) (lab.Options, error) { labs++; return lab.Options{}, errors.New("no") }); err == nil || labs != 1 {
		t.Errorf("without resume: err %v, labs %d", err, labs)
	}
	// The first estimate counts only what will run: fig5.1, and fig4.3,
	// which runs its own lab because fig5.8 is kept.
	dir = t.TempDir()
	write(t, dir, done("fig5.8", 8*time.Minute, "delays"))
	var progress strings.Builder
	RunAll(context.Background(), []string{"fig5.8", "fig5.1", "fig4.3"}, Options{Out: dir, Resume: true, Progress: &progress},
		func(string) (lab.Options, error) { return lab.Options{}, errors.New("no") })
	est := func(n string) time.Duration { x, _ := Lookup(n); return x.Estimate(false) }
	for _, want := range []string{
		fmt.Sprintf("fig5.1, 0s elapsed, about %s left", (est("fig5.1") + est("fig4.3")).Round(time.Minute)),
		fmt.Sprintf("fig4.3, 0s elapsed, about %s left", est("fig4.3").Round(time.Minute)),
	} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress does not say %q:\n%s", want, progress.String())
		}
	}
}

func TestMechanismChecks(t *testing.T) {
	s := &Summary{Experiment: "fig5.1", Runs: []*RunResult{{Name: "readers", Jain: 0.999}}}
	cs := mechanismChecks(s)
	if len(cs) != 1 || !cs[0].OK {
		t.Errorf("fig5.1 at Jain 0.999: %+v", cs)
	}
	s.Runs[0].Jain = 0.8
	if cs := mechanismChecks(s); cs[0].OK {
		t.Errorf("fig5.1 at Jain 0.8 passed: %+v", cs)
	}
	s = &Summary{Experiment: "fig5.3", Runs: []*RunResult{{Name: "run1", ScheduleEffects: []Effect{
		{Host: "b2", SetAtS: 10, BeforeMBs: 3.3, DuringMBs: 1.5, Others: []string{"b3", "b4", "b5"}, OthersBeforeMBs: 9, OthersDuringMBs: 10, OthersRiseSE: 0.2,
			DropAfterSeconds: 0.4, DropResolutionS: 0.1},
		// Down in 1.3 s; the others gain less than twice their noise.
		{Host: "b3", SetAtS: 20, BeforeMBs: 3.3, DuringMBs: 1.5, Others: []string{"b4", "b5"}, OthersBeforeMBs: 9, OthersDuringMBs: 9.3, OthersRiseSE: 0.2,
			DropAfterSeconds: 1.3, DropResolutionS: 0.1},
		// 1 s intervals only: 1.9 s is within their 2 s; no free other.
		{Host: "b4", SetAtS: 30, BeforeMBs: 3.3, DuringMBs: 1.5, OthersBeforeMBs: 0, OthersDuringMBs: 1,
			DropAfterSeconds: 1.9, DropResolutionS: 1},
	}}}}
	var ok []bool
	for _, c := range mechanismChecks(s) {
		ok = append(ok, c.OK)
	}
	if !slices.Equal(ok, []bool{true, true, false, false, true, false}) {
		t.Errorf("checks %v: want b2's two met, b3's slow drop and its others' noise-level gain missed, b4's 1 s-bin drop met and its want of free others missed", ok)
	}
}
