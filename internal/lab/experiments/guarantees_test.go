package experiments

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

func burstLine(thread int, end, dur, mbs float64) iolog.Record {
	return iolog.Record{Kind: iolog.KindBurst, Thread: thread, Op: iolog.OpWrite, T: end, Dur: dur, MBs: mbs}
}

func TestBurstJain(t *testing.T) {
	bs := []Burst{{OnsetS: 10, EndS: 20}, {OnsetS: 30, EndS: 40}}
	// Host b3 (offset 10 s) has two threads: equal in the first burst,
	// one at a quarter of the other's rate in the second; host b4 has
	// only per-second lines, which count when no burst line falls in a
	// burst (none do here, as b3's do).
	w := []WriterLog{{Host: "b3", Offset: 10, Records: []iolog.Record{
		burstLine(1, 8, 8, 4), burstLine(2, 8, 8, 4),
		burstLine(1, 28, 8, 4), burstLine(2, 28, 8, 1),
	}}}
	got := burstJain(bs, w)
	// (4+1)² / (2·(16+1)) = 25/34
	if want := []float64{1, iolog.Round3(25.0 / 34)}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}

	// Without burst lines (continuous writers, older logs): bytes per
	// thread over the burst's seconds.
	var recs []iolog.Record
	for k := 1; k <= 10; k++ {
		recs = append(recs,
			iolog.Record{Kind: iolog.KindInterval, Thread: 1, Op: iolog.OpWrite, T: float64(k), Bytes: 2e6},
			iolog.Record{Kind: iolog.KindInterval, Thread: 2, Op: iolog.OpWrite, T: float64(k), Bytes: 2e6})
	}
	got = burstJain([]Burst{{OnsetS: 0, EndS: 10}}, []WriterLog{{Host: "b3", Records: recs}})
	if !reflect.DeepEqual(got, []float64{1}) {
		t.Errorf("from intervals: got %v, want [1]", got)
	}
}

func TestBinCVAndSteadySeconds(t *testing.T) {
	tl := synth([]float64{1, 1, 1, 1, 1, 1}, ".####.")
	even := []int64{1e5, 1e5, 1e5, 1e5, 1e5, 1e5, 1e5, 1e5, 1e5, 1e5}
	uneven := []int64{0, 2e5, 0, 2e5, 0, 2e5, 0, 2e5, 0, 2e5}
	tl.WriteBins = [][]int64{nil, uneven, even, even, uneven, nil}
	// The first and last active seconds are the burst's edges: out.
	mark := steadySeconds(tl, nil, false)
	if want := []bool{false, false, true, true, false, false}; !reflect.DeepEqual(mark, want) {
		t.Fatalf("steady %v, want %v", mark, want)
	}
	if cv, n, mbs := binCV(tl, mark); cv != 0 || n != 2 || mbs != 1 {
		t.Errorf("even bins: cv %v over %d s at %v MB/s", cv, n, mbs)
	}
	// One second alternating empty and double bins (CV 1), one even:
	// the root mean square is √½.
	tl.WriteBins[2] = uneven
	if cv, n, _ := binCV(tl, mark); math.Abs(cv-math.Sqrt(0.5)) > 1e-3 || n != 2 {
		t.Errorf("half uneven: cv %v over %d s, want %.3f", cv, n, math.Sqrt(0.5))
	}
	// A slow change of rate between seconds is not unevenness.
	tl.WriteBins[2] = []int64{3e5, 3e5, 3e5, 3e5, 3e5, 3e5, 3e5, 3e5, 3e5, 3e5}
	if cv, _, mbs := binCV(tl, mark); cv != 0 || mbs != 2 {
		t.Errorf("two even seconds at different rates: cv %v at %v MB/s", cv, mbs)
	}
	tl.WriteBins[2] = uneven
	// Controlled: only seconds throttled through every tick.
	var ticks []Tick
	for i := 0; i < 60; i++ {
		tk := Tick{T: 0.05 + float64(i)*0.1, DelayMs: 5, Members: 3}
		if tk.T > 3.5 && tk.T < 3.6 {
			tk.DelayMs = 0 // one released tick in second 4
		}
		ticks = append(ticks, tk)
	}
	if mark := steadySeconds(tl, ticks, true); !reflect.DeepEqual(mark, []bool{false, false, true, false, false, false}) {
		t.Errorf("controlled steady %v", mark)
	}
	if cv, n, _ := binCV(tl, make([]bool, 6)); cv != -1 || n != 0 {
		t.Errorf("no seconds: %v %d", cv, n)
	}
}

func TestGuaranteeChecks(t *testing.T) {
	th := 15.0
	// The uncontrolled run is unfair and stalls (the disk's doing): it
	// is the reference, not judged.
	none := &RunResult{Name: "w-none", Group: "w", Writers: 1, Retransmits: 2,
		Guarantees: &Guarantees{BurstJain: []float64{0.7}, MinJain: 0.7, MaxWriteIOMs: 1500,
			WriteCV: 0.2, CVMBs: 30, ReaderP95Ms: 20, ReaderMBs: 0.262}}
	good := &RunResult{Name: "w-pid", Group: "w", Writers: 1, ThresholdMs: &th, Retransmits: 1,
		RetransmitsBy: map[string]int64{"sanqos-b3": 1, "sanqos-bm": 3}, DSACKsBy: map[string]int64{"sanqos-b3": 1},
		RTOsBy: map[string]int64{"sanqos-bm": 2},
		Guarantees: &Guarantees{BurstJain: []float64{0.99, 0.95}, MinJain: 0.95, MaxWriteIOMs: 300, MaxWriteGapMs: 310,
			WriteCV: 0.42, CVSeconds: 30, CVMBs: 15, ReaderP95Ms: 22.9, ReaderMBs: 0.24}}
	good.Guarantees.RTOs, good.Guarantees.Undetected = lossOf(good)
	if good.Guarantees.RTOs != 0 || good.Guarantees.Undetected != 0 {
		t.Fatalf("the target's namespace counted: %+v", good.Guarantees)
	}
	bad := &RunResult{Name: "w-bad", Group: "w", Writers: 1, ThresholdMs: &th, Retransmits: 3,
		RetransmitsBy: map[string]int64{"sanqos-b3": 3}, DSACKsBy: map[string]int64{"sanqos-b3": 1}, RTOsBy: map[string]int64{"sanqos-b3": 1},
		Guarantees: &Guarantees{BurstJain: []float64{0.8}, MinJain: 0.8, MaxWriteIOMs: 1200, WriteCV: 0.43, CVSeconds: 30, CVMBs: 15, ReaderP95Ms: 23.1, ReaderMBs: 0.23}}
	bad.Guarantees.RTOs, bad.Guarantees.Undetected = lossOf(bad)
	cs := guaranteeChecks(&Summary{Runs: []*RunResult{none, good, bad}})
	verdict := map[string]bool{}
	for _, c := range cs {
		verdict[c.Run+": "+c.What] = c.OK
	}
	want := map[string]bool{
		"w-pid: Jain's index over the writers, every burst":                 true,
		"w-pid: longest wait of a writer thread for one I/O":                true,
		"w-pid: nothing lost: no RTO, every retransmission a DSACKed probe": true,
		"w-pid: writers' 100 ms throughput CV while throttled":              true,
		"w-pid: never worse: reader p95 wait":                               true, // 22.9 ≤ 20·1.1 + 1
		"w-pid: never worse: reader throughput":                             true, // 0.24 ≥ 0.262·0.9
		"w-bad: Jain's index over the writers, every burst":                 false,
		"w-bad: longest wait of a writer thread for one I/O":                false,
		"w-bad: nothing lost: no RTO, every retransmission a DSACKed probe": false,
		"w-bad: writers' 100 ms throughput CV while throttled":              false, // 0.43 > 1.5 · 0.2 · √(30/15) = 0.424
		"w-bad: never worse: reader p95 wait":                               false,
		"w-bad: never worse: reader throughput":                             false,
	}
	if !reflect.DeepEqual(verdict, want) {
		t.Errorf("verdicts\n got %v\nwant %v", verdict, want)
	}
	for _, c := range cs {
		if c.Run == "w-pid" && strings.HasPrefix(c.What, "Jain") && !strings.Contains(c.Got, "uncontrolled: min 0.700") ||
			c.Run == "w-pid" && strings.HasPrefix(c.What, "longest wait") && !strings.Contains(c.Got, "uncontrolled: 1500 ms") {
			t.Errorf("%s: %q does not show the uncontrolled reference", c.What, c.Got)
		}
	}
	// Too few throttled seconds: the CV is not judged.
	bad.Guarantees.CVSeconds = 2
	for _, c := range guaranteeChecks(&Summary{Runs: []*RunResult{none, bad}}) {
		if strings.Contains(c.What, "CV") {
			t.Errorf("CV judged on 2 s: %+v", c)
		}
	}
	for _, c := range cs {
		if strings.HasPrefix(c.What, "nothing lost") && c.Run == "w-pid" && !strings.Contains(c.Got, "uncontrolled: 2 segments") {
			t.Errorf("the loss check does not show the uncontrolled count: %q", c.Got)
		}
	}
}

// A stream the disk alone keeps very even does not make a paced run's
// ordinary unevenness a miss: the limit never falls under MinCVLimit,
// while a bursty run (CV near 1) still misses.
func TestCVLimitFloor(t *testing.T) {
	if lim := cvLimit(0.04, 40.9, 26.5); lim != MinCVLimit {
		t.Errorf("limit %v for an uncontrolled CV of 0.04, want the floor %v", lim, MinCVLimit)
	}
	if lim := cvLimit(0.3, 30, 30); math.Abs(lim-0.45) > 1e-9 {
		t.Errorf("limit %v for an uncontrolled CV of 0.3, want 1.5 × 0.3", lim)
	}
	if 1.0 <= cvLimit(0.04, 40.9, 26.5) {
		t.Error("a CV of 1 (all of a second's data in a few bins) passes")
	}
}

// The tail of a run, where the writers' time ends a second into a burst
// only one host had started, is not judged for fairness; a whole burst
// with the same imbalance is.
func TestBurstJainSkipsTailBursts(t *testing.T) {
	w := []WriterLog{{Host: "b3", Records: []iolog.Record{
		burstLine(1, 20, 8, 4), burstLine(2, 20, 8, 0.01), burstLine(3, 20, 8, 0.01),
		burstLine(1, 40.2, 0.5, 4), burstLine(2, 40.2, 0.5, 0.01), burstLine(3, 40.2, 0.5, 0.01),
	}}}
	got := burstJain([]Burst{{OnsetS: 12, EndS: 22}, {OnsetS: 40, EndS: 41}}, w)
	if len(got) != 1 || got[0] > 0.4 {
		t.Fatalf("got %v, want one judged burst (the whole one) with its index near 1/3", got)
	}
}

// secondLines are thread th's per-second write lines ending at
// from+1 … to, each with mbs MB.
func secondLines(th int, from, to int, mbs float64) []iolog.Record {
	var out []iolog.Record
	for k := from + 1; k <= to; k++ {
		out = append(out, iolog.Record{Kind: iolog.KindInterval, Thread: th, Op: iolog.OpWrite, T: float64(k), Dur: 1, Bytes: int64(mbs * 1e6)})
	}
	return out
}

// Two hosts whose schedules drifted 3 s apart: host a writes alone at
// the burst's start, before the throttle holds it, host b alone at its
// end while the throttle still does. Over their own on time a got
// twice b's rate; in the 7 s both were on, each got the same. Fairness
// is judged over those; a thread held back while both were on is
// caught, and a burst whose threads shared under minSharedS seconds is
// not judged.
func TestBurstJainJudgesTheSharedSeconds(t *testing.T) {
	drift := func(a, b float64) []WriterLog {
		ra := append(secondLines(1, 10, 13, 40), secondLines(1, 13, 20, a)...)
		rb := append(secondLines(1, 13, 20, b), secondLines(1, 20, 23, 5)...)
		ra = append(ra, burstLine(1, 20, 10, (3*40+7*a)/10))
		rb = append(rb, burstLine(1, 23, 10, (7*b+3*5)/10))
		return []WriterLog{{Host: "a", Records: ra}, {Host: "b", Records: rb}}
	}
	burst := []Burst{{OnsetS: 10, EndS: 23}}
	fair := drift(10, 10)
	if old := iolog.JainIndex([]float64{19, 8.5}); old >= MinJain {
		t.Fatalf("the test's drift no longer shows: rates over the on time give %.3f", old)
	}
	if got := burstJain(burst, fair); !reflect.DeepEqual(got, []float64{1}) {
		t.Errorf("equal shares while both were on: got %v, want [1]", got)
	}
	// (16+4)² / (2·(256+16)) = 400/544
	if got := burstJain(burst, drift(16, 4)); len(got) != 1 || got[0] != iolog.Round3(400.0/544) {
		t.Errorf("b held to a quarter of a's rate while both were on: got %v, want [%.3f]", got, 400.0/544)
	}
	if got := burstJain(burst, drift(10, 0)); len(got) != 1 || got[0] > 0.51 {
		t.Errorf("b starved while both were on: got %v, want [0.5]", got)
	}
	apart := []WriterLog{
		{Host: "a", Records: append(secondLines(1, 10, 19, 10), burstLine(1, 19, 9, 10))},
		{Host: "b", Records: append(secondLines(1, 18, 27, 10), burstLine(1, 27, 9, 10))},
	}
	if got := burstJain([]Burst{{OnsetS: 10, EndS: 27}}, apart); len(got) != 0 {
		t.Errorf("threads on together for 1 s were judged: %v", got)
	}
}

// TestFastChecks: guarantees-ssd's controlled run is judged against its
// uncontrolled one by the reader's mean and p95 wait (within NoiseRel)
// and the writers' loss (under MaxFastWriterLoss); the lab run
// (mean 1.63 → 1.84 ms, writers −28 %) fails both, a run that released
// its delay passes.
func TestFastChecks(t *testing.T) {
	none := &RunResult{Name: "fast-ssd-none", Group: fastGroup, WaitMs: Stats{Mean: 1.63, P95: 2.2}, WriteMBs: 250}
	for _, tc := range []struct {
		name            string
		mean, p95, wmbs float64
		reader, writers bool
	}{
		{"released", 1.64, 2.25, 245, true, true},
		{"issue 33", 1.84, 2.4, 180, false, false},
		{"p95 worse", 1.6, 2.5, 250, false, true},
		{"writers pay 6 %", 1.6, 2.1, 235, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &RunResult{Name: "fast-ssd-pid-1.16ms", Group: fastGroup, WaitMs: Stats{Mean: tc.mean, P95: tc.p95}, WriteMBs: tc.wmbs}
			cs := fastChecks(r, none)
			if len(cs) != 2 || cs[0].OK != tc.reader || cs[1].OK != tc.writers {
				t.Errorf("checks %+v, want reader %v writers %v", cs, tc.reader, tc.writers)
			}
		})
	}
}
