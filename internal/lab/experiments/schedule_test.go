package experiments

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var labHosts = []string{"b2", "b3", "b4", "b5"}

func TestValidateSchedule(t *testing.T) {
	s := func(h string, at, until int, d, r float64, dir string) Step {
		return Step{Host: h, At: time.Duration(at) * time.Second, Until: time.Duration(until) * time.Second, DelayMs: d, RateMBs: r, Direction: dir}
	}
	for _, c := range []struct {
		name  string
		steps []Step
		want  string // "" valid
	}{
		{"in turn", []Step{s("b2", 10, 20, 0, 2, ""), s("b3", 20, 30, 0, 2, ""), s("b2", 30, 40, 5, 0, "read")}, ""},
		{"unknown host", []Step{s("b9", 10, 20, 5, 0, "")}, `host "b9"`},
		{"backwards", []Step{s("b2", 20, 10, 5, 0, "")}, "not inside"},
		{"past the end", []Step{s("b2", 50, 70, 5, 0, "")}, "not inside"},
		{"neither", []Step{s("b2", 10, 20, 0, 0, "")}, "one of them"},
		{"both", []Step{s("b2", 10, 20, 5, 2, "")}, "one of them"},
		{"rate on writes", []Step{s("b2", 10, 20, 0, 2, "write")}, "reads only"},
		{"overlap", []Step{s("b2", 10, 20, 5, 0, ""), s("b2", 15, 25, 0, 2, "")}, "same time"},
	} {
		err := validateSchedule(c.steps, time.Minute, labHosts)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func TestSchedulePlansAreValid(t *testing.T) {
	for _, e := range registry() {
		if !strings.HasPrefix(e.Name, "fig5.") {
			continue
		}
		for _, short := range []bool{false, true} {
			for _, r := range e.planned(short) {
				if err := validateSchedule(r.c.Schedule, r.w.Total, labHosts); err != nil {
					t.Errorf("%s %s (short %v): %v", e.Name, r.name, short, err)
				}
				if len(r.c.Schedule) > 0 && r.c.Controller != "none" {
					t.Errorf("%s %s: a schedule needs the observing daemon, has controller %q", e.Name, r.name, r.c.Controller)
				}
			}
		}
	}
}

// TestEventsFreeBeforeSet: a host moved from one window straight into the
// next is freed first, or the set would be refused (one throttle per
// consumer) or undone by the free.
func TestEventsFreeBeforeSet(t *testing.T) {
	steps := []Step{
		{Host: "b2", At: 10 * time.Second, Until: 20 * time.Second, RateMBs: 2},
		{Host: "b2", At: 20 * time.Second, Until: 30 * time.Second, DelayMs: 5},
	}
	ev := events(steps)
	got := make([]string, len(ev))
	for i, e := range ev {
		got[i] = e.at.String() + map[bool]string{true: " set ", false: " free "}[e.set] + string(rune('0'+e.step))
	}
	want := []string{"10s set 0", "20s free 0", "20s set 1", "30s free 1"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

func TestThrottleArgs(t *testing.T) {
	rate := Step{Host: "b3", RateMBs: 2.5}
	delay := Step{Host: "b3", DelayMs: 9.6, Direction: "read"}
	for _, c := range []struct {
		s    Step
		set  bool
		want string
	}{
		{rate, true, "--ip 10.0.0.3 --rate 2.5MB/s --port 3260"},
		{delay, true, "--ip 10.0.0.3 --delay 9.6ms --direction read --port 3260"},
		{Step{DelayMs: 4.6}, true, "--delay 4.6ms --direction write"},
		{rate, false, "--ip 10.0.0.3 --free"},
	} {
		if got := strings.Join(throttleArgs(c.s, "10.0.0.3", 3260, c.set), " "); !strings.Contains(got, c.want) {
			t.Errorf("%+v set %v: %q, want it to contain %q", c.s, c.set, got, c.want)
		}
	}
}

// scheduleTimeline: four hosts at 9 MB/s; b3 at 2 MB/s from second 12
// to 20 (its window is 10.2–20.1 s, so the second ending at 11 is mixed,
// 5 MB/s), the others at 11.3 meanwhile.
func scheduleTimeline() Timeline {
	tl := Timeline{HostMBs: map[string][]float64{}}
	for k := 1; k <= 30; k++ {
		tl.T = append(tl.T, float64(k))
		for _, h := range labHosts {
			v := 9.0
			switch {
			case h == "b3" && k == 11:
				v = 5
			case h == "b3" && k > 11 && k <= 20:
				v = 2
			case h != "b3" && k > 11 && k <= 20:
				v = 11.3
			}
			tl.HostMBs[h] = append(tl.HostMBs[h], v)
		}
	}
	return tl
}

func TestScheduleEffects(t *testing.T) {
	applied := []Applied{{Step: Step{Host: "b3", RateMBs: 2}, FromS: 10.2, ToS: 20.1}, {Step: Step{Host: "b4"}, FromS: -1, ToS: -1}}
	got := scheduleEffects(scheduleTimeline(), applied)
	if len(got) != 1 {
		t.Fatalf("effects %+v, want one (the step that never took effect has none)", got)
	}
	e := got[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(e.BeforeMBs, 9) || !near(e.DuringMBs, 2) || !near(e.OthersBeforeMBs, 27) || !near(e.OthersDuringMBs, 3*11.3) {
		t.Errorf("effect %+v: want b3 9 → 2 MB/s, the others 27 → 33.9", e)
	}
	if !near(e.DropAfterSeconds, 1.8) {
		t.Errorf("drop after %v s, want 1.8 (the second ending at 12 is the first at the window.s level; 11 is mixed, 5 MB/s)", e.DropAfterSeconds)
	}
}

func TestPlotScheduleShadesWindows(t *testing.T) {
	dir := t.TempDir()
	r := &RunResult{Name: "run1", Dir: filepath.Join(dir, "run1"), timeline: scheduleTimeline(),
		Schedule: []Applied{{Step: Step{Host: "b3", RateMBs: 2}, FromS: 10.2, ToS: 20.1}}}
	s := &Summary{Experiment: "fig5.2", Title: "test"}
	files, err := plotSchedule(s, []*RunResult{r, r})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("files %v", files)
	}
	if fi, err := os.Stat(filepath.Join(s.outDir([]*RunResult{r}), files[0])); err != nil || fi.Size() < 10000 {
		t.Fatalf("plot %v: %v", fi, err)
	}
	if sp := spans(r.Schedule, []string{"b2", "b3", "b4", "b5"}); len(sp) != 1 || sp[0].Color != 1 || sp[0].Label != "b3 capped at 2 MB/s" {
		t.Errorf("spans %+v", sp)
	}
}
