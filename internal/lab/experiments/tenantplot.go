package experiments

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"

	"github.com/sanqos/sanqos/internal/lab/plot"
)

// plotTenants draws, per run, each tenant's rate (writers, with their
// terms in the legend) and each reader's wait beside its own threshold.
func plotTenants(s *Summary, runs []*RunResult) ([]string, error) {
	var panels []plot.Panel
	for _, r := range runs {
		if r.Tenants == nil {
			continue
		}
		panels = append(panels, tenantWriterPanel(r))
		if p, ok := tenantReaderPanel(r); ok {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return nil, nil
	}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "tenants.png"), "tenants: each consumer against its own terms", xLabel, panels); err != nil {
		return nil, err
	}
	return []string{"tenants.png"}, nil
}

func tenantWriterPanel(r *RunResult) plot.Panel {
	p := plot.Panel{Title: r.Name + ": each writer's rate (1 s)", YLabel: "MB/s"}
	for _, w := range r.Tenants.Writers {
		name := w.Host
		switch {
		case w.Share > 0:
			name += fmt.Sprintf(" share %g (%.0f %% of throttled bytes, want %.0f %%)", w.Share, w.SharePct, w.WantPct)
		case w.ReserveMBs > 0:
			name += fmt.Sprintf(" reserved %g MB/s", w.ReserveMBs)
			p.HLines = append(p.HLines, plot.HLine{Y: w.ReserveMBs, Label: w.Host + " reservation"})
		case w.CapMBs > 0:
			name += fmt.Sprintf(" capped %g MB/s", w.CapMBs)
			p.HLines = append(p.HLines, plot.HLine{Y: w.CapMBs, Label: w.Host + " cap"})
		}
		p.Series = append(p.Series, plot.Series{Name: name, X: r.timeline.T, Y: r.timeline.HostMBs[w.Host]})
	}
	return p
}

func tenantReaderPanel(r *RunResult) (plot.Panel, bool) {
	if len(r.Tenants.readerWaits) < 2 {
		return plot.Panel{}, false
	}
	for _, m := range r.Tenants.readerWaits {
		if len(m) == 0 {
			return plot.Panel{}, false
		}
	}
	p := plot.Panel{Title: r.Name + ": each reader's wait (1 s means) and its own threshold", YLabel: "ms"}
	hosts := make([]string, 0, len(r.Tenants.readerWaits))
	for h := range r.Tenants.readerWaits {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		// NaN where it did not read: the line breaks over its pauses.
		m := r.Tenants.readerWaits[h]
		x := slices.Sorted(maps.Keys(m))
		xs := make([]float64, 0, x[len(x)-1])
		ys := make([]float64, 0, x[len(x)-1])
		for k := 1; k <= x[len(x)-1]; k++ {
			w, ok := m[k]
			if !ok {
				w = math.NaN()
			}
			xs, ys = append(xs, float64(k)), append(ys, w)
		}
		p.Series = append(p.Series, plot.Series{Name: h, X: xs, Y: ys})
	}
	for _, rd := range r.Tenants.Readers {
		p.HLines = append(p.HLines, plot.HLine{Y: rd.ThresholdMs, Label: fmt.Sprintf("%s's threshold %g ms", rd.Host, rd.ThresholdMs)})
	}
	return p, true
}
