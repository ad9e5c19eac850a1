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

// sharedDisk is a 12 MB/s disk shared by b2–b5 under the applied
// steps: a throttled host gets 1 MB/s, the free ones share the rest
// equally. A throttle takes 0.4 s to bite (the bins in between at 2.5
// MB/s); withBins adds each host's 100 ms bins.
func sharedDisk(applied []Applied, seconds int, withBins bool) Timeline {
	on := func(h string, t float64) (bool, bool) {
		for _, a := range applied {
			if a.Host == h && a.FromS >= 0 && t > a.FromS && (a.ToS < 0 || t <= a.ToS) {
				return true, t < a.FromS+0.4
			}
		}
		return false, false
	}
	rate := func(h string, t float64) float64 {
		nThrottled := 0
		for _, o := range labHosts {
			if th, _ := on(o, t); th {
				nThrottled++
			}
		}
		switch th, ramp := on(h, t); {
		case ramp:
			return 2.5
		case th:
			return 1
		}
		return (12 - float64(nThrottled)) / float64(len(labHosts)-nThrottled)
	}
	tl := Timeline{HostMBs: map[string][]float64{}, HostBins: map[string][]Bin{}}
	for k := 1; k <= seconds; k++ {
		tl.T = append(tl.T, float64(k))
		for _, h := range labHosts {
			tl.HostMBs[h] = append(tl.HostMBs[h], rate(h, float64(k)-0.5))
			for i := range 10 {
				if end := float64(k-1) + float64(i+1)/10; withBins {
					tl.HostBins[h] = append(tl.HostBins[h], Bin{End: end, MBs: rate(h, end-0.05)})
				}
			}
		}
	}
	return tl
}

func TestScheduleEffects(t *testing.T) {
	// The thesis's schedule, 10 s apart: b2 at 10, b3 at 20, b4 at 30,
	// freed at 40, 50, 60.
	thesis := []Applied{
		{Step: Step{Host: "b2"}, FromS: 10.2, ToS: 40.1},
		{Step: Step{Host: "b3"}, FromS: 20.2, ToS: 50.1},
		{Step: Step{Host: "b4"}, FromS: 30.2, ToS: 60.1},
		{Step: Step{Host: "b5"}, FromS: -1, ToS: -1}, // never took effect
	}
	// Back to back, as this lab first did: b3 set as b2 is freed, so b2
	// recovers in b3's window; it must not count as a gain of the others.
	backToBack := []Applied{
		{Step: Step{Host: "b2"}, FromS: 10.2, ToS: 20.1},
		{Step: Step{Host: "b3"}, FromS: 20.2, ToS: 30.1},
	}
	type want struct {
		host                string
		before, during      float64
		others              string
		othersB, othersD    float64
		drop, dropRes, span float64
	}
	for _, c := range []struct {
		name    string
		applied []Applied
		bins    bool
		want    []want
	}{
		{"thesis schedule, 100 ms bins", thesis, true, []want{
			{"b2", 3, 1, "b3, b4, b5", 9, 11, 0.4, 0.1, 10},
			{"b3", 11.0 / 3, 1, "b4, b5", 22.0 / 3, 10, 0.4, 0.1, 10},
			{"b4", 5, 1, "b5", 5, 9, 0.3, 0.1, 9.9}, // its level is 1.8: 2.5, 2.5, 1, 1, 1 is under it
		}},
		{"thesis schedule, 1 s intervals only", thesis, false, []want{
			{"b2", 3, 1, "b3, b4, b5", 9, 11, 1.8, 1, 10},
			{"b3", 11.0 / 3, 1, "b4, b5", 22.0 / 3, 10, 1.8, 1, 10},
			{"b4", 5, 1, "b5", 5, 9, 1.8, 1, 9.9},
		}},
		{"back to back", backToBack, true, []want{
			{"b2", 3, 1, "b3, b4, b5", 9, 11, 0.4, 0.1, 9.9},
			{"b3", 11.0 / 3, 1, "b4, b5", 22.0 / 3, 22.0 / 3, 0.4, 0.1, 9.9},
		}},
	} {
		got := scheduleEffects(sharedDisk(c.applied, 70, c.bins), c.applied)
		if len(got) != len(c.want) {
			t.Fatalf("%s: effects %+v, want %d", c.name, got, len(c.want))
		}
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
		for i, w := range c.want {
			e := got[i]
			if e.Host != w.host || !near(e.BeforeMBs, w.before) || !near(e.DuringMBs, w.during) || e.OthersText() != w.others ||
				!near(e.OthersBeforeMBs, w.othersB) || !near(e.OthersDuringMBs, w.othersD) || !near(e.SpanS, w.span) {
				t.Errorf("%s: effect %d %+v, want %+v", c.name, i, e, w)
			}
			if !near(e.DropAfterSeconds, w.drop) || e.DropResolutionS != w.dropRes {
				t.Errorf("%s: %s down after %v s (resolution %v), want %v (%v)", c.name, e.Host, e.DropAfterSeconds, e.DropResolutionS, w.drop, w.dropRes)
			}
		}
	}
}

func TestPlotScheduleShadesWindows(t *testing.T) {
	dir := t.TempDir()
	applied := []Applied{{Step: Step{Host: "b3", RateMBs: 2}, FromS: 10.2, ToS: 20.1}}
	r := &RunResult{Name: "run1", Dir: filepath.Join(dir, "run1"), timeline: sharedDisk(applied, 30, false), Schedule: applied}
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
