package experiments

import (
	"math"
	"strings"
	"testing"
	"time"
)

// fig58Timeline: smalljob waits 60 ms with the writers free, 30 ms in the
// 4.6 ms window (30–60 s), 20 ms in the 9.6 ms window (90–120 s).
func fig58Timeline() Timeline {
	var tl Timeline
	for k := 1; k <= 150; k++ {
		t := float64(k)
		w := 60.0
		switch {
		case t > 30 && t <= 60:
			w = 30
		case t > 90 && t <= 120:
			w = 20
		}
		tl.T, tl.WaitMs = append(tl.T, t), append(tl.WaitMs, w)
	}
	tl.WaitMs[100] = math.NaN() // a second without a read
	return tl
}

func TestWindowWaits(t *testing.T) {
	var applied []Applied
	for _, h := range []string{"b3", "b4", "b5"} {
		applied = append(applied,
			Applied{Step: Step{Host: h, DelayMs: 4.6, At: 30 * time.Second, Until: 60 * time.Second}, FromS: 30.05, ToS: 60.02},
			Applied{Step: Step{Host: h, DelayMs: 9.6, At: 90 * time.Second, Until: 120 * time.Second}, FromS: 90.1, ToS: 120.03})
	}
	w := Workload{Lead: 10 * time.Second, WriterTime: 130 * time.Second}
	got := windowWaits(fig58Timeline(), applied, w)
	if len(got) != 3 {
		t.Fatalf("windows %+v, want unthrottled and two", got)
	}
	want := []struct {
		delay, mean float64
	}{{0, 60}, {4.6, 30}, {9.6, 20}}
	for i, c := range want {
		if got[i].DelayMs != c.delay || got[i].MeanMs != c.mean || got[i].Seconds < 20 {
			t.Errorf("window %d: %+v, want delay %g mean %g", i, got[i], c.delay, c.mean)
		}
	}
	if got[1].FromS != 30.05 || got[1].ToS != 60.02 {
		t.Errorf("window bounds %v..%v: want the latest set to the earliest free", got[1].FromS, got[1].ToS)
	}
	s := &Summary{Runs: []*RunResult{{Name: "delays", WindowWaits: got}}}
	cs := windowChecks(s)
	if len(cs) != 3 {
		t.Fatalf("checks %+v", cs)
	}
	for _, c := range cs {
		if !c.OK {
			t.Errorf("check %+v failed on waits that fall", c)
		}
	}
	got[2].MeanMs = 35 // the larger delay helping less must fail
	for _, c := range windowChecks(s) {
		if strings.Contains(c.What, "below wait at 4.6") && c.OK {
			t.Errorf("check %+v passed with 35 ms at 9.6 against 30 at 4.6", c)
		}
	}
}

func TestFig58Plans(t *testing.T) {
	for _, short := range []bool{false, true} {
		p := fig58Runs(short)
		if len(p) != 1 || len(p[0].c.Schedule) != 6 || p[0].w.Writers != 12 || p[0].w.On != "" {
			t.Fatalf("short %v: %+v", short, p)
		}
		if err := validateSchedule(p[0].c.Schedule, p[0].w.Total, labHosts); err != nil {
			t.Errorf("short %v: %v", short, err)
		}
	}
	full := fig58Runs(false)[0].c.Schedule
	if full[0].At != 100*time.Second || full[0].DelayMs != 4.6 || full[3].Until != 370*time.Second || full[3].DelayMs != 9.6 {
		t.Errorf("not the thesis's windows: %+v", full)
	}
}

func TestFig43(t *testing.T) {
	tl := fig58Timeline()
	// Spikes the smoothing must ride out.
	for _, i := range []int{10, 40, 70, 95, 130} {
		tl.WaitMs[i] += 150
	}
	f := fig43Of(&RunResult{Name: "delays", timeline: tl})
	if f.Samples != 149 || len(f.Smoothers) != 3 {
		t.Fatalf("%+v", f)
	}
	raw, ewma := f.Smoothers[0], f.Smoothers[1]
	if !(ewma.RoughnessMs < raw.RoughnessMs/2) {
		t.Errorf("EWMA roughness %v against raw %v: not smoothing", ewma.RoughnessMs, raw.RoughnessMs)
	}
	if f.Verdict == "" || (f.EWMABetter != strings.HasPrefix(f.Verdict, "reproduced")) {
		t.Errorf("verdict %q, EWMA better %v", f.Verdict, f.EWMABetter)
	}
	if m := movingMedian([]float64{5, 1, 9, 3}, 3); m[0] != 5 || m[1] != 3 || m[2] != 5 || m[3] != 3 {
		t.Errorf("moving median %v", m)
	}
	if short := fig43Of(&RunResult{timeline: Timeline{T: []float64{1}, WaitMs: []float64{3}}}); !strings.Contains(short.Verdict, "too few") {
		t.Errorf("one sample: %q", short.Verdict)
	}
}
