package experiments

import (
	"fmt"
	"math"
	"slices"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// minOffSeconds: the writers are off for at least this many whole seconds
// between two bursts; a shorter gap in their activity is a hiccup inside
// one burst (the on/off schedule pauses 5 s, and the hosts pause in turn).
const minOffSeconds = 2

// Burst is what smalljob lived through in one burst of the writers: from
// the start of the first second with writers active (the onset) to the
// end of the last.
type Burst struct {
	// OnsetS is when the writers came on, seconds since the reader
	// started (the start of the first active second); EndS the end of
	// the last active second.
	OnsetS float64 `json:"onset_s"`
	EndS   float64 `json:"end_s"`
	// PeakMs is smalljob's largest 1-second mean wait in the burst; a
	// second without a completed read counts as the burst's length
	// (reads took longer than the second).
	PeakMs float64 `json:"peak_ms"`
	// AboveS is how many seconds of the burst the wait was above
	// OverFactor × threshold (a second with no completed read included).
	AboveS float64 `json:"above_s"`
	// SettleS is the time from the onset until the wait was back under
	// OverFactor × threshold and stayed there to the burst's end; 0 when
	// it never went over, -1 when it was still over at the end.
	SettleS float64 `json:"settle_s"`
	// Truncated: the run ended during the burst (it may have settled
	// later).
	Truncated bool `json:"truncated,omitempty"`
}

// Settled reports whether the wait came back under the limit and stayed.
func (b Burst) Settled() bool { return b.SettleS >= 0 }

// BurstSummary condenses the bursts of one run.
type BurstSummary struct {
	// LimitMs is OverFactor × the run's threshold (uncontrolled runs: the
	// experiment's reference threshold).
	LimitMs float64 `json:"limit_ms"`
	// ResolutionS is the step of the wait samples the settle times are
	// measured on.
	ResolutionS float64 `json:"resolution_s"`
	N           int     `json:"bursts"`
	// SettleMedianS and SettleMaxS are over every burst; a burst that
	// never settled counts as infinitely long, and either is -1 when it
	// lands on such a burst.
	SettleMedianS float64 `json:"settle_median_s"`
	SettleMaxS    float64 `json:"settle_max_s"`
	Unsettled     int     `json:"unsettled"`
	PeakMaxMs     float64 `json:"peak_max_ms"`
	Bursts        []Burst `json:"events"`
}

// burstSpans finds the writers' bursts in an activity series: maximal
// runs of active samples, two of them merged when fewer than minOff
// inactive samples separate them. It returns [first, last] index pairs.
func burstSpans(active []bool, minOff int) [][2]int {
	var spans [][2]int
	for i := 0; i < len(active); i++ {
		if !active[i] {
			continue
		}
		j := i
		for j+1 < len(active) && active[j+1] {
			j++
		}
		if n := len(spans); n > 0 && i-spans[n-1][1]-1 < minOff {
			spans[n-1][1] = j
		} else {
			spans = append(spans, [2]int{i, j})
		}
		i = j
	}
	return spans
}

// analyzeBursts measures every burst of the timeline against limitMs.
// The samples are 1-second means: T[i] is the end of sample i.
func analyzeBursts(tl Timeline, limitMs float64) BurstSummary {
	const step = 1.0
	s := BurstSummary{LimitMs: iolog.Round3(limitMs), ResolutionS: step}
	if limitMs <= 0 {
		return s
	}
	for _, sp := range burstSpans(tl.Active, minOffSeconds) {
		b := Burst{OnsetS: tl.T[sp[0]] - step, EndS: tl.T[sp[1]], SettleS: 0,
			Truncated: sp[1] == len(tl.T)-1}
		lastOver := -1
		for i := sp[0]; i <= sp[1]; i++ {
			w := tl.WaitMs[i]
			over := math.IsNaN(w) || w > limitMs
			if math.IsNaN(w) {
				// No read completed in the whole second: the wait was
				// at least that long.
				w = 1000 * step
			}
			b.PeakMs = max(b.PeakMs, w)
			if over {
				b.AboveS += step
				lastOver = i
			}
		}
		switch {
		case lastOver == sp[1]:
			b.SettleS = -1
		case lastOver >= 0:
			b.SettleS = tl.T[lastOver] - b.OnsetS
		}
		b.PeakMs = iolog.Round3(b.PeakMs)
		b.SettleS = iolog.Round3(b.SettleS)
		s.Bursts = append(s.Bursts, b)
	}
	s.N = len(s.Bursts)
	if s.N == 0 {
		return s
	}
	settle := make([]float64, 0, s.N)
	for _, b := range s.Bursts {
		s.PeakMaxMs = max(s.PeakMaxMs, b.PeakMs)
		if b.Settled() {
			settle = append(settle, b.SettleS)
		} else {
			s.Unsettled++
			settle = append(settle, math.Inf(1))
		}
	}
	slices.Sort(settle)
	finite := func(x float64) float64 {
		if math.IsInf(x, 1) {
			return -1
		}
		return iolog.Round3(x)
	}
	// The median of an even count is the mean of the middle two (an
	// infinite one makes it never).
	n := len(settle)
	med := settle[n/2]
	if n%2 == 0 {
		med = (settle[n/2-1] + settle[n/2]) / 2
	}
	s.SettleMedianS = finite(med)
	s.SettleMaxS = finite(settle[n-1])
	return s
}

// alignedWaits are smalljob's waits of each burst on a time axis that
// starts at the burst's onset, from `before` seconds ahead of it to its
// end: the series of the overlay plot. The sample of second k is drawn
// at its end.
func alignedWaits(tl Timeline, bs []Burst, before float64) (xs, ys [][]float64) {
	for _, b := range bs {
		var x, y []float64
		for i, t := range tl.T {
			if t <= b.OnsetS-before || t > b.EndS {
				continue
			}
			x = append(x, t-b.OnsetS)
			y = append(y, tl.WaitMs[i])
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	return xs, ys
}

// Line is the summary in one line, for the printed output.
func (s BurstSummary) Line() string {
	sec := func(x float64) string {
		if x < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f s", x)
	}
	out := fmt.Sprintf("%d, settle median %s max %s (under %.1f ms), peak %.0f ms", s.N,
		sec(s.SettleMedianS), sec(s.SettleMaxS), s.LimitMs, s.PeakMaxMs)
	if s.Unsettled > 0 {
		out += fmt.Sprintf(", %d never settled", s.Unsettled)
	}
	return out
}
