package experiments

import (
	"math"
	"reflect"
	"testing"
)

// synth builds a timeline from per-second waits and writer activity
// strings: '#' a second with writers active, '.' one without.
func synth(waits []float64, active string) Timeline {
	tl := Timeline{}
	for i := range waits {
		tl.T = append(tl.T, float64(i+1))
		tl.WaitMs = append(tl.WaitMs, waits[i])
		tl.Active = append(tl.Active, active[i] == '#')
		mbs := 0.0
		if active[i] == '#' {
			mbs = 30
		}
		tl.WriteMBs = append(tl.WriteMBs, mbs)
	}
	return tl
}

func TestBurstSpans(t *testing.T) {
	for _, c := range []struct {
		act  string
		want [][2]int
	}{
		{"....", nil},
		{"##..##", [][2]int{{0, 1}, {4, 5}}},
		{"##.##", [][2]int{{0, 4}}}, // a 1 s hiccup is one burst
		{"..###", [][2]int{{2, 4}}},
		{"#", [][2]int{{0, 0}}},
	} {
		act := make([]bool, len(c.act))
		for i := range c.act {
			act[i] = c.act[i] == '#'
		}
		if got := burstSpans(act, minOffSeconds); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %v, want %v", c.act, got, c.want)
		}
	}
}

func TestAnalyzeBursts(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name    string
		waits   []float64
		active  string
		limit   float64
		want    []Burst
		median  float64
		max     float64
		unsettl int
	}{
		{
			name:   "settles after two seconds, then one that never goes over",
			waits:  []float64{8, 8, 40, 25, 16, 17, 8, 8, 8, 9, 10, 9, 8},
			active: "..####...###.",
			limit:  18,
			want: []Burst{
				{OnsetS: 2, EndS: 6, PeakMs: 40, AboveS: 2, SettleS: 2},
				{OnsetS: 9, EndS: 12, PeakMs: 10, AboveS: 0, SettleS: 0},
			},
			median: 1, max: 2,
		},
		{
			name:   "a burst that never settles",
			waits:  []float64{8, 50, 12, 30, 60, 8, 8},
			active: ".####..",
			limit:  18,
			want:   []Burst{{OnsetS: 1, EndS: 5, PeakMs: 60, AboveS: 3, SettleS: -1}},
			median: -1, max: -1, unsettl: 1,
		},
		{
			name:   "a burst at the end of the run, and a second with no read",
			waits:  []float64{8, 8, nan, 20, 10},
			active: "..###",
			limit:  18,
			want:   []Burst{{OnsetS: 2, EndS: 5, PeakMs: 1000, AboveS: 2, SettleS: 2, Truncated: true}},
			median: 2, max: 2,
		},
		{
			name:   "an uncontrolled run judged against the reference (1.2 × 15 ms)",
			waits:  []float64{8, 60, 70, 65, 8, 8, 55, 17, 8},
			active: ".###..###",
			limit:  OverFactor * 15,
			want: []Burst{
				{OnsetS: 1, EndS: 4, PeakMs: 70, AboveS: 3, SettleS: -1},
				{OnsetS: 6, EndS: 9, PeakMs: 55, AboveS: 1, SettleS: 1, Truncated: true},
			},
			median: -1, max: -1, unsettl: 1,
		},
		{
			name:   "three bursts: the median is the middle one",
			waits:  []float64{30, 8, 8, 30, 30, 8, 8, 8, 30, 30, 30, 8, 8},
			active: "##..##...####",
			limit:  18,
			want: []Burst{
				{OnsetS: 0, EndS: 2, PeakMs: 30, AboveS: 1, SettleS: 1},
				{OnsetS: 4, EndS: 6, PeakMs: 30, AboveS: 1, SettleS: 1},
				{OnsetS: 9, EndS: 13, PeakMs: 30, AboveS: 2, SettleS: 2, Truncated: true},
			},
			median: 1, max: 2,
		},
		{
			name:   "no writers",
			waits:  []float64{8, 8},
			active: "..",
			limit:  18,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := analyzeBursts(synth(c.waits, c.active), c.limit)
			if !reflect.DeepEqual(s.Bursts, c.want) {
				t.Fatalf("bursts\n got %+v\nwant %+v", s.Bursts, c.want)
			}
			if s.N != len(c.want) {
				t.Errorf("N %d, want %d", s.N, len(c.want))
			}
			if len(c.want) == 0 {
				return
			}
			if s.SettleMedianS != c.median || s.SettleMaxS != c.max || s.Unsettled != c.unsettl {
				t.Errorf("median %g max %g unsettled %d, want %g %g %d", s.SettleMedianS, s.SettleMaxS, s.Unsettled, c.median, c.max, c.unsettl)
			}
		})
	}
}

func TestAlignedWaits(t *testing.T) {
	tl := synth([]float64{1, 2, 3, 4, 5, 6, 7, 8}, "..###...")
	s := analyzeBursts(tl, 18)
	xs, ys := alignedWaits(tl, s.Bursts, 2)
	if !reflect.DeepEqual(xs, [][]float64{{-1, 0, 1, 2, 3}}) || !reflect.DeepEqual(ys, [][]float64{{1, 2, 3, 4, 5}}) {
		t.Errorf("got %v %v", xs, ys)
	}
}
