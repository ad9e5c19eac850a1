package experiments

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/lab/plot"
)

// The thesis's fixed delays of Fig. 5.8, on the 12 writers in two
// windows: 4.6 ms from 100 to 190 s, then 9.6 ms from 280 to 370 s.
var fig58Windows = []struct {
	delayMs   float64
	at, until time.Duration
}{{4.6, 100 * time.Second, 190 * time.Second}, {9.6, 280 * time.Second, 370 * time.Second}}

// fig58Runs is smalljob beside 12 continuous sequential writers on b3-b5
// with the thesis's two delay windows on every writer (the short version
// scales the times by a third).
func fig58Runs(short bool) []plannedRun {
	total, scale := 460*time.Second, 1.0
	if short {
		total, scale = 160*time.Second, 1.0/3
	}
	var sched []Step
	for _, w := range fig58Windows {
		for _, h := range []string{"b3", "b4", "b5"} {
			sched = append(sched, Step{Host: h, DelayMs: w.delayMs, Direction: "write",
				At: time.Duration(float64(w.at) * scale), Until: time.Duration(float64(w.until) * scale)})
		}
	}
	w := Workload{Total: total, Lead: leadTime, WriterTime: total - leadTime - tailTime, Writers: 12}
	return []plannedRun{{"delays", w, Control{Controller: "none", Schedule: sched}}}
}

// WindowWait is smalljob's mean wait over one delay window of fig5.8 (the
// writers' delay; 0: the seconds the writers ran unthrottled, 5 s after
// each window left out while the queue refills).
type WindowWait struct {
	DelayMs float64 `json:"delay_ms"`
	FromS   float64 `json:"from_s"`
	ToS     float64 `json:"to_s"`
	MeanMs  float64 `json:"mean_ms"`
	Seconds int     `json:"seconds"`
}

// windowWaits splits the writers' active time into the schedule's delay
// windows (as applied: the latest set to the earliest free of a window's
// hosts) and the rest.
func windowWaits(tl Timeline, applied []Applied, w Workload) []WindowWait {
	type key struct {
		delay     float64
		at, until time.Duration
	}
	wins := map[key]*WindowWait{}
	var order []key
	for _, a := range applied {
		if a.FromS < 0 || a.ToS < a.FromS {
			continue
		}
		k := key{a.DelayMs, a.At, a.Until}
		if wins[k] == nil {
			wins[k] = &WindowWait{DelayMs: a.DelayMs, FromS: a.FromS, ToS: a.ToS}
			order = append(order, k)
		}
		ww := wins[k]
		ww.FromS, ww.ToS = math.Max(ww.FromS, a.FromS), math.Min(ww.ToS, a.ToS)
	}
	out := []WindowWait{{DelayMs: 0, FromS: w.Lead.Seconds(), ToS: (w.Lead + w.WriterTime).Seconds()}}
	for _, k := range order {
		out = append(out, *wins[k])
	}
	sums := make([]float64, len(out))
	for i, t := range tl.T {
		wait := tl.WaitMs[i]
		if math.IsNaN(wait) || t <= out[0].FromS+1 || t > out[0].ToS {
			continue
		}
		j := 0
		for k := 1; k < len(out); k++ {
			switch {
			case t > out[k].FromS+1 && t <= out[k].ToS:
				j = k
			case t > out[k].FromS && t <= out[k].FromS+1, t > out[k].ToS && t <= out[k].ToS+5:
				j = -1 // the step's own second, and the queue refilling after
			}
		}
		if j >= 0 {
			sums[j] += wait
			out[j].Seconds++
		}
	}
	for i := range out {
		if out[i].Seconds > 0 {
			out[i].MeanMs = math.Round(sums[i]/float64(out[i].Seconds)*100) / 100
		}
	}
	return out
}

// windowChecks are fig5.8's targets: smalljob waits less in each delay
// window than with the writers unthrottled, and less at the larger delay.
func windowChecks(s *Summary) []Check {
	var out []Check
	for _, r := range s.Runs {
		ww := r.WindowWaits
		if len(ww) < 2 {
			continue
		}
		for _, w := range ww[1:] {
			out = append(out, Check{r.Name, fmt.Sprintf("smalljob's mean wait with %g ms on the writers", w.DelayMs),
				fmt.Sprintf("< %.1f ms (unthrottled)", ww[0].MeanMs), fmt.Sprintf("%.1f ms", w.MeanMs), w.Seconds > 0 && w.MeanMs < ww[0].MeanMs})
		}
		byDelay := slices.Clone(ww[1:])
		slices.SortFunc(byDelay, func(a, b WindowWait) int { return int(math.Copysign(1, a.DelayMs-b.DelayMs)) })
		for i := 1; i < len(byDelay); i++ {
			lo, hi := byDelay[i-1], byDelay[i]
			out = append(out, Check{r.Name, fmt.Sprintf("wait at %g ms below wait at %g ms", hi.DelayMs, lo.DelayMs),
				fmt.Sprintf("< %.1f ms", lo.MeanMs), fmt.Sprintf("%.1f ms", hi.MeanMs), hi.MeanMs < lo.MeanMs})
		}
	}
	return out
}

// plotFig58 draws smalljob's wait over time with the delay windows shaded
// and each window's mean wait as a level across it.
func plotFig58(s *Summary, runs []*RunResult) ([]string, error) {
	var panels []plot.Panel
	for _, r := range runs {
		p := plot.Panel{Title: r.Name + ": smalljob's wait (1 s means), writers delayed in the shaded windows", YLabel: "ms",
			Series: []plot.Series{{Name: "smalljob's wait", X: r.timeline.T, Y: r.timeline.WaitMs}}}
		for i, w := range r.WindowWaits {
			if w.DelayMs == 0 {
				continue
			}
			p.Spans = append(p.Spans, plot.Span{From: w.FromS, To: w.ToS, Label: fmt.Sprintf("writers delayed %g ms: mean %.1f ms", w.DelayMs, w.MeanMs), Color: i})
			p.Series = append(p.Series, plot.Series{X: []float64{w.FromS, w.ToS}, Y: []float64{w.MeanMs, w.MeanMs}})
		}
		if len(r.WindowWaits) > 0 {
			p.HLines = []plot.HLine{{Y: r.WindowWaits[0].MeanMs, Label: fmt.Sprintf("unthrottled mean %.1f ms", r.WindowWaits[0].MeanMs)}}
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil, nil
	}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "fig5.8.png"), "fig5.8: "+s.Title, xLabel, panels); err != nil {
		return nil, err
	}
	return []string{"fig5.8.png"}, nil
}
