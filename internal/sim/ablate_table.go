package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// AblationTable holds an ablation's runs: M[v][c][s] is variant v on
// case c with seed s; variant 0 is the full law.
type AblationTable struct {
	Variants []AblationVariant
	Cases    []AblationCase
	Seeds    []int64
	M        [][][]Metrics
}

// Ablate runs every case under every variant with every seed; variants
// must start with the full law. progress, when set, is called after each
// variant.
func Ablate(variants []AblationVariant, cases []AblationCase, seeds []int64, progress func(AblationVariant)) (*AblationTable, error) {
	t := &AblationTable{Variants: variants, Cases: cases, Seeds: seeds}
	for _, v := range variants {
		per := make([][]Metrics, len(cases))
		for ci, c := range cases {
			for _, seed := range seeds {
				m, err := RunAblation(c, v, seed)
				if err != nil {
					return nil, fmt.Errorf("%s on %s, seed %d: %w", v.Name, c.Name, seed, err)
				}
				per[ci] = append(per[ci], m)
			}
		}
		t.M = append(t.M, per)
		if progress != nil {
			progress(v)
		}
	}
	return t, nil
}

// The ablation's metrics, as columns: how to read each from Metrics, its
// smallest meaningful difference (a resolution below which the spread of
// five seeds is no yardstick: a second in 120, a 1 % share), and which
// way is worse (+1: more is worse, −1: less).
type ablationMetric struct {
	name  string
	get   func(m, full Metrics) float64
	floor float64
	worse float64
}

var ablationMetrics = []ablationMetric{
	{"Δ p95/T", func(m, _ Metrics) float64 { return m.P95OverT }, 0.01, 1},
	{"Δ over % (pt)", func(m, _ Metrics) float64 { return m.OverPct }, 1, 1},
	{"Δ settle s", func(m, _ Metrics) float64 { return m.SettleS }, 1, 1},
	// The writers' rate relative to the full law's on the same seed.
	{"Δ writers' MB/s %", func(m, full Metrics) float64 { return 100 * (m.WriteMBs/full.WriteMBs - 1) }, 1, -1},
}

// delta is variant v's paired difference from the full law on case c,
// per seed, for metric k (the full law's own value is its difference
// from itself, 0, except for the share, whose full-law values are the
// seeds' spread around their mean).
func (t *AblationTable) delta(v, c, k int) []float64 {
	g := ablationMetrics[k].get
	var d []float64
	for s := range t.Seeds {
		full := t.M[0][c][s]
		d = append(d, g(t.M[v][c][s], full)-g(full, full))
	}
	return d
}

// spread is the run-to-run spread of metric k on case c: the standard
// deviation across seeds of the full law's value (the share's as a
// percentage of its mean), never under the metric's floor.
func (t *AblationTable) spread(c, k int) float64 {
	var xs []float64
	var mean float64
	for s := range t.Seeds {
		m := t.M[0][c][s]
		x := ablationMetrics[k].get(m, m)
		if k == 3 {
			x = m.WriteMBs
		}
		xs = append(xs, x)
		mean += x / float64(len(t.Seeds))
	}
	sd := sdev(xs)
	if k == 3 && mean > 0 {
		sd = 100 * sd / mean
	}
	return max(sd, ablationMetrics[k].floor)
}

// beyond says whether the paired differences d of metric k on case c
// are beyond the run-to-run spread: their mean further from 0 than both
// the full law's spread and twice its own standard error (so that one
// seed's outlier is not an effect).
func (t *AblationTable) beyond(c, k int, d []float64) bool {
	m := math.Abs(mean(d))
	return m > t.spread(c, k) && m > 2*sdev(d)/math.Sqrt(float64(len(d)))
}

// Effect is how variant v differs from the full law on case c: +1 worse
// beyond the spread in some metric (and better in none), −1 better, 2
// both, 0 within the spread; identical when every run decided the same.
func (t *AblationTable) Effect(v, c int) (effect int, identical bool) {
	identical = true
	worse, better := false, false
	for k := range ablationMetrics {
		d := t.delta(v, c, k)
		for _, x := range d {
			identical = identical && x == 0
		}
		m := ablationMetrics[k].worse * mean(d)
		switch {
		case !t.beyond(c, k, d):
		case m > 0:
			worse = true
		default:
			better = true
		}
	}
	switch {
	case worse && better:
		return 2, identical
	case worse:
		return 1, identical
	case better:
		return -1, identical
	}
	return 0, identical
}

// Markdown writes the tables: the full law per case, then per variant
// the cases it changes beyond the spread, then every case it changes.
func (t *AblationTable) Markdown(w io.Writer) {
	fmt.Fprintf(w, "Seeds %v; Δ = variant − full law, paired by seed, mean ± sd over the seeds; the spread is the full law's sd over the seeds (at least 0.01 p95/T, 1 point, 1 s, 1 %%); beyond the spread: |mean Δ| over the spread and over twice its standard error.\n\n", t.Seeds)
	fmt.Fprintln(w, "Full law:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| case | T ms | s | p95/T | over 1.2 T % | settle s | writers MB/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for ci, c := range t.Cases {
		col := func(f func(Metrics) float64) string {
			var xs []float64
			for _, m := range t.M[0][ci] {
				xs = append(xs, f(m))
			}
			return pm(xs)
		}
		fmt.Fprintf(w, "| %s | %g | %.0f | %s | %s | %s | %s |\n", c.Name, c.ThresholdMs, c.Duration.Seconds(),
			col(func(m Metrics) float64 { return m.P95OverT }), col(func(m Metrics) float64 { return m.OverPct }),
			col(func(m Metrics) float64 { return m.SettleS }), col(func(m Metrics) float64 { return m.WriteMBs }))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Per variant: the cases where it differs from the full law beyond the spread (worse: higher p95, more seconds over, longer settle or fewer MB/s).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| variant | worse in | better in | identical in | verdict |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for vi := 1; vi < len(t.Variants); vi++ {
		var worse, better, same []string
		for ci, c := range t.Cases {
			e, id := t.Effect(vi, ci)
			if e == 1 || e == 2 {
				worse = append(worse, c.Name)
			}
			if e == -1 || e == 2 {
				better = append(better, c.Name)
			}
			if id {
				same = append(same, c.Name)
			}
		}
		verdict := "no effect beyond spread"
		switch {
		case len(same) == len(t.Cases):
			verdict = "no effect: identical runs"
		case len(worse) > 0 && len(better) > 0:
			verdict = "mixed"
		case len(worse) > 0:
			verdict = "removal hurts"
		case len(better) > 0:
			verdict = "removal helps"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d of %d | %s |\n", t.Variants[vi].Name, list(worse), list(better), len(same), len(t.Cases), verdict)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every variant and case that did not run identically to the full law (Δ mean ± sd, spread in brackets, bold beyond it):")
	fmt.Fprintln(w)
	head := "| variant | case |"
	for _, m := range ablationMetrics {
		head += " " + m.name + " |"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, "|---|---|"+strings.Repeat("---|", len(ablationMetrics)))
	for vi := 1; vi < len(t.Variants); vi++ {
		for ci, c := range t.Cases {
			if _, id := t.Effect(vi, ci); id {
				continue
			}
			row := fmt.Sprintf("| %s | %s |", t.Variants[vi].Name, c.Name)
			for k := range ablationMetrics {
				d := t.delta(vi, ci, k)
				cell := fmt.Sprintf("%s [%.2g]", pm(d), t.spread(ci, k))
				if t.beyond(ci, k, d) {
					cell = "**" + cell + "**"
				}
				row += " " + cell + " |"
			}
			fmt.Fprintln(w, row)
		}
	}
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "–"
	}
	return strings.Join(xs, ", ")
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// sdev is the sample standard deviation (0 for one value).
func sdev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m, s := mean(xs), 0.0
	for _, x := range xs {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(xs)-1))
}

// pm formats mean ± sd with a precision fit for the mean.
func pm(xs []float64) string {
	return fmt.Sprintf("%.3g ± %.2g", mean(xs), sdev(xs))
}
