package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/lab/plot"
)

// WriteCSV writes the run's 1-second samples, one row a second.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"t_s", "read_ms", "reads", "reader_kb_s", "write_mb_s", "write_await_ms", "delay_ms", "writers_on"}); err != nil {
		return err
	}
	f := func(x float64) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', 3, 64)
	}
	for _, s := range r.Seconds {
		row := []string{f(s.T), f(s.ReadMs), strconv.Itoa(s.Reads), f(s.ReaderKBs), f(s.WriteMBs), f(s.WriteAwaitMs), f(s.DelayMs), strconv.FormatBool(s.WritersOn)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// Plot draws the run like thesis Fig. 5.13: the read latency with the
// threshold, the throttle delay, the aggregate write rate.
func (r *Result) Plot(path string) error {
	var ts, rd, wr []float64
	for _, s := range r.Seconds {
		ts = append(ts, s.T)
		rd = append(rd, s.ReadMs)
		wr = append(wr, s.WriteMBs)
	}
	var tt, sig, delay []float64
	for _, k := range r.Ticks {
		tt = append(tt, k.T)
		sig = append(sig, k.SignalMs)
		delay = append(delay, k.DelayMs)
	}
	c := r.Config
	title := fmt.Sprintf("sanqos sim: %s scenario, controller %s, threshold %g ms, seed %d", c.Scenario.Name, c.Controller, c.ThresholdMs, c.Seed)
	panels := []plot.Panel{
		{
			Title: "read latency of the shared resource", YLabel: "wait (ms)",
			Series: []plot.Series{
				// The per-tick signal first, so the per-second line is
				// drawn over it.
				{Name: "controller signal (EWMA, per tick)", X: tt, Y: sig},
				{Name: "reader's mean wait per second", X: ts, Y: rd},
			},
			HLines: []plot.HLine{{Y: c.ThresholdMs, Label: fmt.Sprintf("threshold %g ms", c.ThresholdMs)}},
		},
		{Title: "throttle: packet delay of the writers", YLabel: "delay (ms)",
			Series: []plot.Series{{Name: "delay", X: tt, Y: delay}}},
		{Title: "aggregate write rate of the writers", YLabel: "MB/s",
			Series: []plot.Series{{Name: "writes", X: ts, Y: wr}}},
	}
	return plot.Stacked(path, title, "time (s)", append(panels, r.tenantPanels(ts, tt)...))
}

// tenantPanels are a run's per-consumer plots, for scenarios with
// several readers (the tenants experiment): each reader's wait with the
// threshold the resource held, and each writer's rate, by the names the
// scenario's tenant book gives them.
func (r *Result) tenantPanels(ts, tt []float64) []plot.Panel {
	if len(r.Seconds) == 0 || r.Seconds[0].DevWriteMBs == nil {
		return nil
	}
	sc := r.Config.Scenario
	topo := sc.Topology().Resources[0].Consumers
	name := func(i int) string { return tenant.Label(topo[i], sc.Tenants.Terms(topo[i])) }
	var reads, writes []plot.Series
	k := 0
	for i, d := range sc.Devices {
		var y []float64
		for _, s := range r.Seconds {
			if d.Reader {
				y = append(y, s.ReaderMs[k])
			} else {
				y = append(y, s.DevWriteMBs[i])
			}
		}
		if d.Reader {
			reads = append(reads, plot.Series{Name: name(i) + " (mean wait per second)", X: ts, Y: y})
			k++
		} else {
			writes = append(writes, plot.Series{Name: name(i), X: ts, Y: y})
		}
	}
	var th []float64
	for _, t := range r.Ticks {
		th = append(th, t.ThresholdMs)
	}
	reads = append(reads, plot.Series{Name: "threshold the resource holds", X: tt, Y: th})
	return []plot.Panel{
		{Title: "each reader's wait", YLabel: "wait (ms)", Series: reads},
		{Title: "each writer's rate", YLabel: "MB/s", Series: writes},
	}
}

// Compare draws several runs over each other like thesis Fig. 5.9 and
// 5.10: the reader's latency and the aggregate write rate.
func Compare(path, title string, runs []*Result) error {
	var lat, wr []plot.Series
	for _, r := range runs {
		name := r.Config.Controller
		if name != "none" {
			name = fmt.Sprintf("%s %g ms", name, r.Config.ThresholdMs)
		}
		var ts, rd, w []float64
		for _, s := range r.Seconds {
			ts = append(ts, s.T)
			rd = append(rd, s.ReadMs)
			w = append(w, s.WriteMBs)
		}
		lat = append(lat, plot.Series{Name: name, X: ts, Y: rd})
		wr = append(wr, plot.Series{Name: name, X: ts, Y: w})
	}
	return plot.Stacked(path, title, "time (s)", []plot.Panel{
		{Title: "reader's mean wait per second (cf. thesis Fig. 5.9)", YLabel: "wait (ms)", Series: lat},
		{Title: "aggregate write rate (cf. thesis Fig. 5.10)", YLabel: "MB/s", Series: wr},
	})
}

// ReportRuns are the runs of the demo report: the baseline, both
// controllers at 15 ms, and pid at 10 and 20 ms.
var reportRuns = []struct {
	controller string
	threshold  float64
}{{"none", 15}, {"pid", 15}, {"thesis", 15}, {"pid", 10}, {"pid", 20}}

// Report runs the thesis scenario under none, pid and thesis at 15 ms and
// pid at 10 and 20 ms, and writes dir/sim/: one figure per run, a
// comparison figure, summary.json (an array of the runs' summaries) and
// index.html (a table that can be included in a larger page).
func Report(dir string, seed int64) error {
	out := filepath.Join(dir, "sim")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	var runs []*Result
	var sums []Summary
	var rows strings.Builder
	for _, rr := range reportRuns {
		cfg := DefaultConfig()
		cfg.Seed = seed
		cfg.Controller = rr.controller
		cfg.ThresholdMs = rr.threshold
		res, err := Run(cfg)
		if err != nil {
			return fmt.Errorf("simulating %s at %g ms: %w", rr.controller, rr.threshold, err)
		}
		name := fmt.Sprintf("%s-%gms.png", rr.controller, rr.threshold)
		if err := res.Plot(filepath.Join(out, name)); err != nil {
			return err
		}
		runs = append(runs, res)
		sums = append(sums, res.Summary)
		s := res.Summary
		fmt.Fprintf(&rows, "<tr><td><a href=\"%s\">%s</a></td><td>%g</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%.1f / %.1f</td><td>%.0f</td></tr>\n",
			html.EscapeString(name), html.EscapeString(s.Controller), s.ThresholdMs,
			s.ReadLatencyMs.Mean, s.ReadLatencyMs.P50, s.ReadLatencyMs.P95, s.ReadLatencyMs.P99,
			s.OverThresholdPct, s.WriteMBs, s.ThrottleMs.Mean, s.ThrottleMs.Max, s.ReaderKBs)
	}
	// Fig. 5.9's order: no control, then the thresholds from high to low.
	var fig59 []*Result
	for _, want := range []struct {
		c  string
		th float64
	}{{"none", 15}, {"pid", 20}, {"pid", 15}, {"pid", 10}} {
		for _, r := range runs {
			if r.Config.Controller == want.c && r.Config.ThresholdMs == want.th {
				fig59 = append(fig59, r)
			}
		}
	}
	if err := Compare(filepath.Join(out, "compare.png"), "sanqos sim: no control vs pid at 20, 15, 10 ms", fig59); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sums, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the sim summary: %w", err)
	}
	page := fmt.Sprintf(`<section id="sim">
<h2>Simulation of the thesis experiment (seed %d)</h2>
<p>12 sequential 64 KiB sync writers on 3 consumers, switched on together and
paused 5 s between bursts, and one 8 KiB random reader limited to 256 kB/s,
on a model of the thesis's ten-disk array; the production engine controls
the writers' packet delay. Latency figures are over the 1-second samples of
the reader's mean wait while the writers are on; "over" is the share of
those samples above 1.2 × threshold.</p>
<img src="compare.png" alt="reader latency and write rate, none vs pid" width="900">
<table>
<tr><th>controller (figure)</th><th>threshold ms</th><th>mean ms</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th><th>over %%</th><th>write MB/s</th><th>delay mean / max ms</th><th>reader kB/s</th></tr>
%s</table>
</section>
`, seed, rows.String())
	if err := os.WriteFile(filepath.Join(out, "index.html"), []byte(page), 0o644); err != nil {
		return fmt.Errorf("writing the sim report page: %w", err)
	}
	return nil
}
