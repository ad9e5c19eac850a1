package experiments

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/sanqos/sanqos/internal/decide/smoothing"
	"github.com/sanqos/sanqos/internal/lab/plot"
)

// The thesis's visual best fits (§4.4.1, Fig. 4.3) on smalljob's
// per-second wait: EWMA α = 0.15, moving median over 6 samples.
const (
	fig43Alpha  = 0.15
	fig43Window = 6
	// fig43Trend is the half-width, in samples, of the centred moving
	// mean taken as the trend the causal filters are judged against: it
	// sees the future, which no controller can, so it is the reference.
	fig43Trend = 4
)

// Smoother is one causal filter of fig4.3 judged against the trend.
type Smoother struct {
	Name string `json:"name"`
	// RMSToTrendMs is the root mean square distance from the trend;
	// LagS the shift (0–10 s) that brings the filter closest to it;
	// RoughnessMs the RMS of its changes from one second to the next.
	RMSToTrendMs float64 `json:"rms_to_trend_ms"`
	LagS         int     `json:"lag_s"`
	RoughnessMs  float64 `json:"roughness_ms"`
}

// Fig43 is the fig4.3 analysis of one run's smalljob waits.
type Fig43 struct {
	Run       string     `json:"run"`
	Samples   int        `json:"samples"`
	Smoothers []Smoother `json:"smoothers"` // raw, EWMA, moving median
	// Verdict says whether the EWMA is, as the thesis chose it, both
	// closer to the trend and smoother than the moving median.
	EWMABetter bool   `json:"ewma_better"`
	Verdict    string `json:"verdict"`

	raw, ewma, median, trend []float64
	t                        []float64
}

// ewmaOf runs the daemon's own EWMA (package smoothing) over xs.
func ewmaOf(xs []float64, alpha float64) []float64 {
	e, err := smoothing.NewEWMA(alpha)
	if err != nil {
		panic(err) // a constant alpha of this file
	}
	out := make([]float64, len(xs))
	for i, x := range xs {
		if i == 0 {
			// Start at the first sample rather than rising from 0.
			for range 50 {
				e.Update(x)
			}
		}
		out[i] = e.Update(x)
	}
	return out
}

// movingMedian is the median of the last w samples (fewer at the start).
func movingMedian(xs []float64, w int) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		win := slices.Clone(xs[max(0, i-w+1) : i+1])
		slices.Sort(win)
		n := len(win)
		if n%2 == 1 {
			out[i] = win[n/2]
		} else {
			out[i] = (win[n/2-1] + win[n/2]) / 2
		}
	}
	return out
}

// centredMean is the mean of xs[i-h .. i+h].
func centredMean(xs []float64, h int) []float64 {
	out := make([]float64, len(xs))
	for i := range xs {
		lo, hi := max(0, i-h), min(len(xs), i+h+1)
		sum := 0.0
		for _, x := range xs[lo:hi] {
			sum += x
		}
		out[i] = sum / float64(hi-lo)
	}
	return out
}

// judge measures a filter against the trend.
func judge(name string, f, trend []float64) Smoother {
	s := Smoother{Name: name}
	rms := func(shift int) float64 {
		sum, n := 0.0, 0
		for i := shift; i < len(f); i++ {
			d := f[i] - trend[i-shift]
			sum += d * d
			n++
		}
		return math.Sqrt(sum / float64(max(n, 1)))
	}
	s.RMSToTrendMs = round2(rms(0))
	best := math.Inf(1)
	for lag := 0; lag <= 10 && lag < len(f)/2; lag++ {
		if r := rms(lag); r < best {
			best, s.LagS = r, lag
		}
	}
	sum := 0.0
	for i := 1; i < len(f); i++ {
		sum += (f[i] - f[i-1]) * (f[i] - f[i-1])
	}
	s.RoughnessMs = round2(math.Sqrt(sum / float64(max(len(f)-1, 1))))
	return s
}

func round2(x float64) float64 { return math.Round(x*100) / 100 }

// fig43Of analyses a run's per-second waits (seconds without a read left
// out, as iostat's samples had none).
func fig43Of(r *RunResult) *Fig43 {
	f := &Fig43{Run: r.Name}
	for i, w := range r.timeline.WaitMs {
		if !math.IsNaN(w) {
			f.raw, f.t = append(f.raw, w), append(f.t, r.timeline.T[i])
		}
	}
	f.Samples = len(f.raw)
	if f.Samples < 3*fig43Window {
		f.Verdict = fmt.Sprintf("too few samples (%d) to judge", f.Samples)
		return f
	}
	f.ewma, f.median, f.trend = ewmaOf(f.raw, fig43Alpha), movingMedian(f.raw, fig43Window), centredMean(f.raw, fig43Trend)
	e, m := judge(fmt.Sprintf("EWMA α=%g", fig43Alpha), f.ewma, f.trend), judge(fmt.Sprintf("moving median w=%d", fig43Window), f.median, f.trend)
	f.Smoothers = []Smoother{judge("raw 1 s samples", f.raw, f.trend), e, m}
	f.EWMABetter = e.RMSToTrendMs <= m.RMSToTrendMs && e.RoughnessMs <= m.RoughnessMs
	switch {
	case f.EWMABetter:
		f.Verdict = fmt.Sprintf("reproduced: the EWMA is closer to the trend (%.2f against %.2f ms RMS) and smoother (%.2f against %.2f ms per second) than the moving median",
			e.RMSToTrendMs, m.RMSToTrendMs, e.RoughnessMs, m.RoughnessMs)
	case e.RoughnessMs <= m.RoughnessMs:
		f.Verdict = fmt.Sprintf("partly: the EWMA is smoother (%.2f against %.2f ms per second) but further from the trend (%.2f against %.2f ms RMS): it lags %d s where the moving median lags %d s",
			e.RoughnessMs, m.RoughnessMs, e.RMSToTrendMs, m.RMSToTrendMs, e.LagS, m.LagS)
	default:
		f.Verdict = fmt.Sprintf("refuted: the moving median is smoother (%.2f against %.2f ms per second) and %s the trend (%.2f against %.2f ms RMS)",
			m.RoughnessMs, e.RoughnessMs, map[bool]string{true: "as close to", false: "closer to"}[m.RMSToTrendMs >= e.RMSToTrendMs], m.RMSToTrendMs, e.RMSToTrendMs)
	}
	return f
}

// analyzeFig43 stores the analysis of the experiment's first run.
func analyzeFig43(s *Summary) {
	if len(s.Runs) > 0 {
		s.Fig43 = fig43Of(s.Runs[0])
	}
}

// plotFig43 draws the raw samples, the EWMA and the moving median over
// time, as the thesis's Fig. 4.3 does.
func plotFig43(s *Summary, runs []*RunResult) ([]string, error) {
	f := s.Fig43
	if f == nil || f.ewma == nil {
		return nil, nil
	}
	p := plot.Panel{Title: "smalljob's wait and two smoothings of it (the thesis's best fits)", YLabel: "ms", Series: []plot.Series{
		{Name: "smalljob's wait, 1 s samples", X: f.t, Y: f.raw},
		{Name: fmt.Sprintf("moving median, window %d", fig43Window), X: f.t, Y: f.median},
		{Name: fmt.Sprintf("EWMA, α = %g", fig43Alpha), X: f.t, Y: f.ewma},
	}}
	if err := plot.Stacked(filepath.Join(s.outDir(runs), "fig4.3.png"), "fig4.3: smoothing smalljob's wait (run "+f.Run+")", xLabel, []plot.Panel{p}); err != nil {
		return nil, err
	}
	return []string{"fig4.3.png"}, nil
}
