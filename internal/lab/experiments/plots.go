package experiments

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"github.com/sanqos/sanqos/internal/lab/plot"
)

const xLabel = "time since the reader started (s)"

// runPanels are one interference run's panels, like thesis Fig. 5.13:
// the reader's wait (and the daemon's signal) with the threshold, the
// writers' aggregate rate, the throttle delay.
func runPanels(r *RunResult) []plot.Panel {
	tl := r.timeline
	wait := plot.Panel{Title: "smalljob's wait on b2 (initiator, 1 s means)", YLabel: "ms",
		Series: []plot.Series{{Name: "smalljob wait", X: tl.T, Y: tl.WaitMs}}}
	if len(r.ticks) > 0 {
		x, y := tickSeries(r.ticks, func(t Tick) float64 { return t.SignalMs })
		wait.Series = append(wait.Series, plot.Series{Name: "sanqos signal (r_await EWMA)", X: x, Y: y})
	}
	if r.ThresholdMs != nil {
		wait.HLines = []plot.HLine{{Y: *r.ThresholdMs, Label: fmt.Sprintf("threshold %g ms", *r.ThresholdMs)}}
	}
	panels := []plot.Panel{wait, {Title: "writers' aggregate throughput (b3-b5)", YLabel: "MB/s",
		Series: []plot.Series{{Name: "write MB/s", X: tl.T, Y: tl.WriteMBs}}}}
	if len(r.ticks) > 0 {
		x, y := tickSeries(r.ticks, func(t Tick) float64 { return t.DelayMs })
		_, m := tickSeries(r.ticks, func(t Tick) float64 { return float64(t.Members) })
		panels = append(panels, plot.Panel{Title: "throttle (from the daemon's record)", YLabel: "ms / hosts",
			Series: []plot.Series{{Name: "packet delay ms", X: x, Y: y}, {Name: "throttleable set size", X: x, Y: m}}})
	}
	return panels
}

func tickSeries(ts []Tick, f func(Tick) float64) (x, y []float64) {
	for _, t := range ts {
		if t.T < 0 {
			continue // before the reader started
		}
		x = append(x, t.T)
		y = append(y, f(t))
	}
	return x, y
}

// plotInterference draws one figure per run and one comparing them.
func plotInterference(s *Summary, runs []*RunResult) ([]string, error) {
	var files []string
	for _, r := range runs {
		name := "run-" + r.Name + ".png"
		title := fmt.Sprintf("%s: %s", s.Experiment, r.Name)
		if err := plot.Stacked(filepath.Join(r.Dir, "..", name), title, xLabel, runPanels(r)); err != nil {
			return files, err
		}
		files = append(files, name)
	}
	wait := plot.Panel{Title: "smalljob's wait on b2 (1 s means)", YLabel: "ms"}
	write := plot.Panel{Title: "writers' aggregate throughput", YLabel: "MB/s"}
	delay := plot.Panel{Title: "packet delay", YLabel: "ms"}
	seen := map[float64]bool{}
	for _, r := range runs {
		wait.Series = append(wait.Series, plot.Series{Name: r.Name, X: r.timeline.T, Y: r.timeline.WaitMs})
		write.Series = append(write.Series, plot.Series{Name: r.Name, X: r.timeline.T, Y: r.timeline.WriteMBs})
		x, y := tickSeries(r.ticks, func(t Tick) float64 { return t.DelayMs })
		delay.Series = append(delay.Series, plot.Series{Name: r.Name, X: x, Y: y})
		if r.ThresholdMs != nil && !seen[*r.ThresholdMs] {
			seen[*r.ThresholdMs] = true
			wait.HLines = append(wait.HLines, plot.HLine{Y: *r.ThresholdMs, Label: fmt.Sprintf("%g ms", *r.ThresholdMs)})
		}
	}
	sort.Slice(wait.HLines, func(i, j int) bool { return wait.HLines[i].Y > wait.HLines[j].Y })
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "compare.png"), s.Experiment+": all runs", xLabel,
		[]plot.Panel{wait, write, delay}); err != nil {
		return files, err
	}
	bursts, err := plotBursts(s, runs)
	if err != nil {
		return files, err
	}
	return append(append([]string{"compare.png"}, bursts...), files...), nil
}

// outDir is the experiment's directory (each run's Dir is inside it).
func (s *Summary) outDir(runs []*RunResult) string {
	if s.out != "" {
		return s.out
	}
	if len(runs) == 0 {
		return "."
	}
	return filepath.Dir(runs[0].Dir)
}

// plotFig57 draws the reader's wait of every run over time (Fig. 5.7).
func plotFig57(s *Summary, runs []*RunResult) ([]string, error) {
	wait := plot.Panel{Title: "smalljob's wait on b2 (1 s means); writers start at the vertical line", YLabel: "ms"}
	write := plot.Panel{Title: "writers' aggregate throughput", YLabel: "MB/s"}
	for _, r := range runs {
		label := fmt.Sprintf("%d writers", r.Writers)
		wait.Series = append(wait.Series, plot.Series{Name: label, X: r.timeline.T, Y: r.timeline.WaitMs})
		write.Series = append(write.Series, plot.Series{Name: label, X: r.timeline.T, Y: r.timeline.WriteMBs})
	}
	if len(runs) > 0 {
		// A vertical marker is not in package plot; mark the start with
		// a short series instead.
		lead := runs[0].Workload.Lead.Seconds()
		ymax := 0.0
		for _, r := range runs {
			for _, v := range r.timeline.WaitMs {
				if !math.IsNaN(v) {
					ymax = math.Max(ymax, v)
				}
			}
		}
		wait.Series = append(wait.Series, plot.Series{Name: "writers start", X: []float64{lead, lead}, Y: []float64{0, ymax}})
	}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "fig5.7.png"), "fig5.7: smalljob against sequential writers", xLabel,
		[]plot.Panel{wait, write}); err != nil {
		return nil, err
	}
	return []string{"fig5.7.png"}, nil
}

// plotFig51 draws each reader's throughput over time (Fig. 5.1).
func plotFig51(s *Summary, runs []*RunResult) ([]string, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	r := runs[0]
	p := plot.Panel{Title: "sequential 32 KiB readers, one per initiator", YLabel: "MB/s"}
	hosts := make([]string, 0, len(r.timeline.HostMBs))
	for h := range r.timeline.HostMBs {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		p.Series = append(p.Series, plot.Series{Name: h, X: r.timeline.T, Y: r.timeline.HostMBs[h]})
	}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "fig5.1.png"), "fig5.1: four equal readers share the disk", xLabel,
		[]plot.Panel{p}); err != nil {
		return nil, err
	}
	return []string{"fig5.1.png"}, nil
}

// plotBursts draws smalljob's wait around every burst of the writers,
// aligned on its onset and overlaid, one panel per run: how high each
// burst's start takes the wait and how fast it comes back.
func plotBursts(s *Summary, runs []*RunResult) ([]string, error) {
	var panels []plot.Panel
	for _, r := range runs {
		if r.Bursts == nil || r.Bursts.N == 0 {
			continue
		}
		p := plot.Panel{Title: fmt.Sprintf("%s: smalljob's wait in each of %d bursts (1 s means, at the second's end)", r.Name, r.Bursts.N),
			YLabel: "ms", HLines: []plot.HLine{{Y: r.Bursts.LimitMs, Label: fmt.Sprintf("%.1f ms (1.2 × threshold)", r.Bursts.LimitMs)}}}
		xs, ys := alignedWaits(r.timeline, r.Bursts.Bursts, 5)
		for i := range xs {
			// Unnamed: dozens of bursts would bury the plot in legend.
			p.Series = append(p.Series, plot.Series{X: xs[i], Y: ys[i]})
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil, nil
	}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "bursts.png"), s.Experiment+": every burst aligned on the writers' onset",
		"time since the writers' onset (s)", panels); err != nil {
		return nil, err
	}
	return []string{"bursts.png"}, nil
}
