package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/diskstats"
)

// openLoop applies a constant delay to every writer and never looks at the
// signal: it measures the plant itself.
type openLoop struct {
	delay float64
	sc    Scenario
}

func (o openLoop) Step(time.Time, []diskstats.Stat) Decision {
	d := Decision{DelayMs: o.delay}
	for _, x := range o.sc.Devices {
		if !x.Reader {
			d.Members = append(d.Members, x.Addr)
		}
	}
	return d
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	r, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// skipLong skips a test of several long simulations under -short, which
// is the race run's: the simulation runs on one goroutine, so the race
// detector finds nothing in it and only slows it many times over. The
// run without -short runs them.
func skipLong(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("long simulations on one goroutine; the run without -short covers them")
	}
}

func activeLatencies(r *Result) []float64 {
	var v []float64
	for _, s := range r.Seconds {
		if s.WritersOn && !math.IsNaN(s.ReadMs) {
			v = append(v, s.ReadMs)
		}
	}
	return v
}

// TestCalibration holds the thesis-2010 profile to the thesis's numbers
// (§5.5, §5.7, Fig. 5.7, 5.10, 5.13): 12 sequential 64 KiB sync writers
// reach 37–39 MB/s; the 8 KiB reader waits 5–10 ms alone and 30–120 ms
// against the writers.
func TestCalibration(t *testing.T) {
	seeds := []int64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1] // the race run is ~10× slower
	}
	for _, seed := range seeds {
		cfg := DefaultConfig()
		cfg.Controller = "none"
		cfg.Seed = seed
		cfg.Duration = 150 * time.Second
		r, err := RunWith(cfg, openLoop{0, cfg.Scenario})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Summary
		if s.WriteMBs < 37 || s.WriteMBs > 39.5 {
			t.Errorf("seed %d: 12 writers reach %.1f MB/s, thesis 37–39", seed, s.WriteMBs)
		}
		if s.ReaderIdleMs < 5 || s.ReaderIdleMs > 10 {
			t.Errorf("seed %d: reader alone waits %.1f ms, thesis 5–10", seed, s.ReaderIdleMs)
		}
		lat := activeLatencies(r)
		if len(lat) < 100 {
			t.Fatalf("seed %d: only %d samples with writers on", seed, len(lat))
		}
		// The burst's first second mixes in the idle reader; judge the
		// reader's wait by the 5th–100th percentiles.
		if lo, hi := quantileOf(lat, 0.05), quantileOf(lat, 1); lo < 30 || hi > 120 {
			t.Errorf("seed %d: reader against writers waits %.1f–%.1f ms (p5–max), thesis 30–120", seed, lo, hi)
		}
	}
}

func quantileOf(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	for i := 1; i < len(s); i++ { // insertion sort: keeps the test independent of sort
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return quantile(s, q)
}

// TestDelayThrottlesWriters: a larger packet delay gives fewer MB/s and a
// lower read latency, the close-to-linear region of thesis Fig. 5.6 and
// §5.6 on which the controller relies.
func TestDelayThrottlesWriters(t *testing.T) {
	var prevW, prevL float64 = math.Inf(1), math.Inf(1)
	for _, d := range []float64{0, 12, 20} {
		cfg := DefaultConfig()
		cfg.Duration = 100 * time.Second
		r, err := RunWith(cfg, openLoop{d, cfg.Scenario})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Summary
		if !(s.WriteMBs < prevW) || !(s.ReadLatencyMs.Mean < prevL) {
			t.Errorf("delay %g ms: %.1f MB/s, %.1f ms; want both below the smaller delay's %.1f MB/s, %.1f ms",
				d, s.WriteMBs, s.ReadLatencyMs.Mean, prevW, prevL)
		}
		prevW, prevL = s.WriteMBs, s.ReadLatencyMs.Mean
	}
}

// TestPIDHoldsThresholds is the simulator's promise: pid keeps the p95 of
// the reader's 1-second latency within 1.2 × threshold at 10, 15 and
// 20 ms, where no control gives ≥ 2 × 15 ms; and the reader gets at least
// the throughput it gets without control (seed 000's lesson).
func TestPIDHoldsThresholds(t *testing.T) {
	skipLong(t)
	base := DefaultConfig()
	base.Controller = "none"
	none := run(t, base).Summary
	if none.ReadLatencyMs.P95 < 30 {
		t.Errorf("none: p95 %.1f ms, want ≥ 30 (2 × 15 ms)", none.ReadLatencyMs.P95)
	}
	for _, th := range []float64{10, 15, 20} {
		cfg := DefaultConfig()
		cfg.ThresholdMs = th
		s := run(t, cfg).Summary
		if s.ReadLatencyMs.P95 > 1.2*th {
			t.Errorf("pid %g ms: p95 %.2f ms > %.1f (1.2 × threshold)", th, s.ReadLatencyMs.P95, 1.2*th)
		}
		if s.ReaderKBs < none.ReaderKBs {
			t.Errorf("pid %g ms: reader gets %.1f kB/s, less than %.1f without control", th, s.ReaderKBs, none.ReaderKBs)
		}
		if s.ThrottleMs.Max <= 0 || s.WriteMBs <= 0 {
			t.Errorf("pid %g ms: throttle %+v, writes %.1f MB/s: the loop did not act", th, s.ThrottleMs, s.WriteMBs)
		}
		t.Logf("pid %g ms: p95 %.2f, over %.1f%%, write %.1f MB/s, delay mean %.1f", th, s.ReadLatencyMs.P95, s.OverThresholdPct, s.WriteMBs, s.ThrottleMs.Mean)
	}
}

// TestPIDBeatsThesisController: on the same plant and seed the thesis's
// controller (Listing A.2) spends more of the time over 1.2 × threshold.
func TestPIDBeatsThesisController(t *testing.T) {
	cfg := DefaultConfig()
	pid := run(t, cfg).Summary
	cfg.Controller = "thesis"
	th := run(t, cfg).Summary
	if !(pid.OverThresholdPct < th.OverThresholdPct) || !(pid.ReadLatencyMs.P95 < th.ReadLatencyMs.P95) {
		t.Errorf("pid over %.1f%% p95 %.1f; thesis over %.1f%% p95 %.1f: want pid lower on both",
			pid.OverThresholdPct, pid.ReadLatencyMs.P95, th.OverThresholdPct, th.ReadLatencyMs.P95)
	}
}

func TestDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 60 * time.Second
	enc := func(c Config) string {
		b, err := json.Marshal(run(t, c).Summary)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := enc(cfg), enc(cfg)
	if a != b {
		t.Fatalf("same seed, different results:\n%s\n%s", a, b)
	}
	cfg.Seed = 2
	if c := enc(cfg); c == a {
		t.Errorf("seeds 1 and 2 gave identical results: the seed is not used")
	}
}

// TestSnapshotIsDiskstats: the plant's text parses with the production
// parser, and the reader's device shows the latency the plant measured.
func TestSnapshotIsDiskstats(t *testing.T) {
	sc := ThesisScenario()
	p, err := newPlant(sc, epoch, 1)
	if err != nil {
		t.Fatal(err)
	}
	end := epoch.Add(20 * time.Second)
	for p.q.Len() > 0 && p.q[0].at.Before(end) {
		p.handle(popEvent(p))
	}
	var b strings.Builder
	p.snapshot(end, &b)
	var parser diskstats.Parser
	stats, bad := parser.Parse(nil, []byte(b.String()))
	if len(bad) > 0 || len(stats) != len(sc.Devices) {
		t.Fatalf("parsed %d devices, errors %v, from:\n%s", len(stats), bad, b.String())
	}
	r := stats[p.readers[0].dev]
	if r.Device != "dm-0" || r.Fields != 20 || r.ReadIOs == 0 || r.ReadSectors != r.ReadIOs*16 {
		t.Errorf("reader line %+v: want dm-0, 20 fields, 16 sectors a read", r)
	}
	c := p.dev[p.readers[0].dev]
	if got, want := float64(r.ReadTicks)/float64(r.ReadIOs), c.readMs/float64(c.reads); math.Abs(got-want) > 0.01 {
		t.Errorf("r_await from diskstats %.3f ms, plant measured %.3f ms", got, want)
	}
	var written uint64
	for i, s := range stats {
		if i != p.readers[0].dev {
			written += s.WriteSectors
		}
	}
	if written == 0 || stats[p.readers[0].dev].WriteIOs != 0 {
		t.Errorf("writers wrote %d sectors, reader %d writes: want writers only", written, stats[p.readers[0].dev].WriteIOs)
	}
}

func TestReportWritesSection(t *testing.T) {
	if testing.Short() {
		t.Skip("five 300 s simulations and six figures; skipped with -short")
	}
	dir := t.TempDir()
	if err := Report(dir, 1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sim", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sums []Summary
	if err := json.Unmarshal(b, &sums); err != nil {
		t.Fatal(err)
	}
	if len(sums) != len(reportRuns) {
		t.Fatalf("summary has %d runs, want %d", len(sums), len(reportRuns))
	}
	page, err := os.ReadFile(filepath.Join(dir, "sim", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		name := s.Controller + "-" + trimFloat(s.ThresholdMs) + "ms.png"
		if _, err := os.Stat(filepath.Join(dir, "sim", name)); err != nil {
			t.Errorf("figure of %s: %v", name, err)
		}
		if !strings.Contains(string(page), name) {
			t.Errorf("index.html does not link %s", name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sim", "compare.png")); err != nil {
		t.Error(err)
	}
}

func trimFloat(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}

func TestFastEnough(t *testing.T) {
	// 300 s of virtual time must take a few seconds at most; measured
	// here against a generous bound because the machine is shared.
	start := time.Now()
	run(t, DefaultConfig())
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("300 s of virtual time took %v", d)
	} else {
		t.Logf("300 s of virtual time in %v", d)
	}
}

func TestBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Controller = "bangbang"
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "bangbang") {
		t.Errorf("unknown controller: err %v", err)
	}
	cfg = DefaultConfig()
	cfg.Duration = 0
	if _, err := Run(cfg); err == nil {
		t.Error("zero duration accepted")
	}
	if _, err := ScenarioByName("nope"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

func popEvent(p *plant) event { return p.q.pop() }

// TestHarderWriters: writers far harder than the thesis's. Twice its
// threads switched on at once are held at 1.2 × threshold like the
// thesis's; small random writers, whose first I/Os reach the disk before
// any delay can act, push the uncontrolled wait past 10 × threshold at
// its worst, and pid cuts their p95 to under a fifth of it.
func TestHarderWriters(t *testing.T) {
	skipLong(t)
	for _, tc := range []struct {
		sc       Scenario
		maxP95   float64 // pid's p95 limit (ms) at 15 ms
		noneP99  float64 // the uncontrolled p99 must exceed this
		maxShare float64 // pid p95 / none p95
	}{
		{Surge24Scenario(), 1.2 * 15, 2 * 15, 0.3},
		{RandWScenario(), 2 * 15, 10 * 15, 0.2},
	} {
		t.Run(tc.sc.Name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scenario = tc.sc
			cfg.Controller = "none"
			none := run(t, cfg).Summary
			cfg.Controller = "pid"
			pid := run(t, cfg).Summary
			t.Logf("%s: none p95 %.1f p99 %.1f ms %.1f MB/s; pid p95 %.1f ms, %.1f%% over, %.1f MB/s, delay mean %.1f max %.1f ms",
				tc.sc.Name, none.ReadLatencyMs.P95, none.ReadLatencyMs.P99, none.WriteMBs, pid.ReadLatencyMs.P95, pid.OverThresholdPct, pid.WriteMBs, pid.ThrottleMs.Mean, pid.ThrottleMs.Max)
			if none.ReadLatencyMs.P99 < tc.noneP99 {
				t.Errorf("uncontrolled p99 %.1f ms, want over %.0f: the scenario is not as hard as it claims", none.ReadLatencyMs.P99, tc.noneP99)
			}
			if pid.ReadLatencyMs.P95 > tc.maxP95 || pid.ReadLatencyMs.P95 > tc.maxShare*none.ReadLatencyMs.P95 {
				t.Errorf("pid p95 %.1f ms, want ≤ %.1f and ≤ %.0f%% of uncontrolled %.1f", pid.ReadLatencyMs.P95, tc.maxP95, 100*tc.maxShare, none.ReadLatencyMs.P95)
			}
			if pid.ReaderKBs < none.ReaderKBs {
				t.Errorf("pid: reader gets %.1f kB/s, less than %.1f uncontrolled", pid.ReaderKBs, none.ReaderKBs)
			}
		})
	}
}

// TestSSDSubMillisecond: on the simulated SSD the reader waits 0.15 ms
// alone and tens of ms behind the streams; through the plant's block-layer
// probe (microseconds) pid holds sub-millisecond thresholds on the median
// second, with p95 as the signal, where diskstats' whole milliseconds
// cannot even see the threshold.
func TestSSDSubMillisecond(t *testing.T) {
	skipLong(t)
	cfg := DefaultConfig()
	cfg.Scenario = SSDScenario()
	cfg.Controller = "none"
	none := run(t, cfg).Summary
	for _, th := range []float64{0.5, 1, 2} {
		cfg := DefaultConfig()
		cfg.Scenario = SSDScenario()
		cfg.ThresholdMs = th
		cfg.Signal = "p95"
		s := run(t, cfg).Summary
		t.Logf("ssd p95 at %g ms: reader p50 %.2f p95 %.2f ms, %.1f%% over, %.0f MB/s (uncontrolled p50 %.1f ms, %.0f MB/s)",
			th, s.ReadLatencyMs.P50, s.ReadLatencyMs.P95, s.OverThresholdPct, s.WriteMBs, none.ReadLatencyMs.P50, none.WriteMBs)
		if s.ReadLatencyMs.P50 > th || s.ReadLatencyMs.P95 > none.ReadLatencyMs.P95/5 {
			t.Errorf("threshold %g ms: reader p50 %.2f ms, p95 %.2f ms; want p50 under the threshold and p95 under a fifth of uncontrolled %.1f", th, s.ReadLatencyMs.P50, s.ReadLatencyMs.P95, none.ReadLatencyMs.P95)
		}
	}
}

// TestThresholdsFitTheDevice: with the default gains, no per-threshold
// tuning, pid holds promises from 0.2 to 50 ms, each on a device where it
// means something (the thesis's array waits 5 ms alone, the SSD 0.15 ms):
// the p95 of the reader's 1-second wait while the writers run stays
// within 1.2 × threshold, and the writers keep their share of the disk —
// all but the 0.2 ms promise, 1.3 × the SSD's idle wait, which leaves room
// for only a trickle of writes, keep at least half of their uncontrolled
// rate.
func TestThresholdsFitTheDevice(t *testing.T) {
	skipLong(t)
	ssd, thesis := SSDScenario(), ThesisScenario()
	uncontrolled := map[string]float64{}
	for _, sc := range []Scenario{ssd, thesis} {
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Controller = sc, "none"
		uncontrolled[sc.Name] = run(t, cfg).Summary.WriteMBs
	}
	for _, tc := range []struct {
		sc          Scenario
		thresholdMs float64
		minShare    float64 // writers' MB/s over uncontrolled
	}{
		{ssd, 0.2, 0.05},
		{ssd, 0.5, 0.5},
		{ssd, 1, 0.5},
		{ssd, 2, 0.5},
		{ssd, 5, 0.5},
		{thesis, 15, 0.5},
		{thesis, 50, 0.5},
	} {
		t.Run(fmt.Sprintf("%s/%gms", tc.sc.Name, tc.thresholdMs), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Scenario, cfg.ThresholdMs = tc.sc, tc.thresholdMs
			s := run(t, cfg).Summary
			share := s.WriteMBs / uncontrolled[tc.sc.Name]
			t.Logf("%s %g ms: p95 %.3f ms (%.2f×), %.1f%% of seconds over 1.2×, writers %.1f MB/s (%.0f%% of uncontrolled), delay mean %.2f ms",
				tc.sc.Name, tc.thresholdMs, s.ReadLatencyMs.P95, s.ReadLatencyMs.P95/tc.thresholdMs, s.OverThresholdPct, s.WriteMBs, 100*share, s.ThrottleMs.Mean)
			if s.ReadLatencyMs.P95 > 1.2*tc.thresholdMs {
				t.Errorf("p95 %.3f ms > 1.2 × %g ms", s.ReadLatencyMs.P95, tc.thresholdMs)
			}
			if share < tc.minShare {
				t.Errorf("writers %.1f MB/s, %.0f%% of uncontrolled %.1f: want ≥ %.0f%%", s.WriteMBs, 100*share, uncontrolled[tc.sc.Name], 100*tc.minShare)
			}
		})
	}
}

// TestFixedDelayFrontier: a static throttle on the writers (the lab's
// frontier experiment) costs them throughput and spares the reader, more
// so the larger the delay; it replaces the controller, so asking for both
// is an error.
func TestFixedDelayFrontier(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Controller, cfg.Duration = "none", 60*time.Second
	prevMBs, prevP95 := math.Inf(1), math.Inf(1)
	for _, d := range []float64{0, 5, 7.5, 10, 15, 20, 60} {
		cfg.FixedDelayMs = d
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := res.Summary
		t.Logf("fixed %2g ms: writers %.1f MB/s, reader p95 %.1f ms, delay mean %.1f ms", d, s.WriteMBs, s.ReadLatencyMs.P95, s.ThrottleMs.Mean)
		if d > 0 && math.Abs(s.ThrottleMs.Mean-d) > 1e-9 {
			t.Errorf("fixed %g ms: the plant saw a mean delay of %g ms", d, s.ThrottleMs.Mean)
		}
		// A small delay only trims the disk's queue (a few % either way
		// in throughput); the reader must gain from every step.
		if s.WriteMBs > 1.03*prevMBs || s.ReadLatencyMs.P95 >= prevP95 {
			t.Errorf("fixed %g ms: writers %.1f MB/s, p95 %.1f ms; want p95 below and MB/s not above the smaller delay's (%.1f, %.1f)", d, s.WriteMBs, s.ReadLatencyMs.P95, prevMBs, prevP95)
		}
		prevMBs, prevP95 = s.WriteMBs, s.ReadLatencyMs.P95
	}
	cfg.Controller = "pid"
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "controller none") {
		t.Errorf("a fixed delay with pid: err %v, want one that says to use controller none", err)
	}
}
