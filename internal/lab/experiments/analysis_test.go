package experiments

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/serve/status"
)

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, []int{0, 0, 0}},
		{1, []int{1, 0, 0}},
		{3, []int{1, 1, 1}},
		{4, []int{2, 1, 1}},
		{12, []int{4, 4, 4}},
	} {
		if got := spread(tc.n, 3); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("spread(%d, 3) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestStatsOf(t *testing.T) {
	if got := statsOf(nil); got != (Stats{}) {
		t.Errorf("statsOf(nil) = %+v, want zero", got)
	}
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 100}
	got := statsOf(xs)
	want := Stats{Mean: 14.5, P50: 10, P95: 19, Max: 100, N: 20}
	if got != want {
		t.Errorf("statsOf = %+v, want %+v", got, want)
	}
}

func interval(t, dur, mbs, lat float64, ios int64, op string) iolog.Record {
	return iolog.Record{Kind: iolog.KindInterval, T: t, Dur: dur, Op: op, MBs: mbs, IOs: ios, Lat: iolog.Latency{Mean: lat}}
}

func TestBuildTimelineAlignsWritersStartedLater(t *testing.T) {
	reader := []iolog.Record{
		interval(1.0004, 1, 0.26, 8, 32, iolog.OpRead),
		interval(2.0003, 1, 0.26, 9, 32, iolog.OpRead),
		interval(3.0002, 1, 0.26, 40, 32, iolog.OpRead),
		interval(4.0001, 1, 0, 0, 0, iolog.OpRead), // no I/O this second
		interval(5.0002, 1, 0.26, 50, 32, iolog.OpRead),
		{Kind: iolog.KindSummary, T: 5, Op: iolog.OpRead},
	}
	// Writers started 2 s after the reader: their second 1 is second 3.
	b3 := []iolog.Record{
		interval(1.0001, 1, 10, 20, 150, iolog.OpWrite),
		interval(2.0001, 1, 12, 20, 180, iolog.OpWrite),
		interval(2.4, 0.4, 0.2, 20, 1, iolog.OpWrite), // the short last interval
	}
	b4 := []iolog.Record{interval(1.0002, 1, 5, 20, 80, iolog.OpWrite)}
	tl := buildTimeline(reader, []WriterLog{{"b3", 2, b3}, {"b4", 2, b4}})
	if want := []float64{1, 2, 3, 4, 5}; !reflect.DeepEqual(tl.T, want) {
		t.Fatalf("T = %v, want %v", tl.T, want)
	}
	if want := []float64{0, 0, 15, 12, 0}; !reflect.DeepEqual(tl.WriteMBs, want) {
		t.Errorf("WriteMBs = %v, want %v", tl.WriteMBs, want)
	}
	if want := []bool{false, false, true, true, false}; !reflect.DeepEqual(tl.Active, want) {
		t.Errorf("Active = %v, want %v", tl.Active, want)
	}
	if !math.IsNaN(tl.WaitMs[3]) {
		t.Errorf("a second without reads has wait %v, want NaN (a gap, not 0)", tl.WaitMs[3])
	}
	if got := tl.activeWaits(); !reflect.DeepEqual(got, []float64{40}) {
		t.Errorf("activeWaits = %v, want [40]: second 4 had writers but no reads", got)
	}
	if got := tl.windowWaits(2, 5); !reflect.DeepEqual(got, []float64{40, 50}) {
		t.Errorf("windowWaits(2,5) = %v, want [40 50]", got)
	}
	if got := tl.HostMBs["b4"]; !reflect.DeepEqual(got, []float64{0, 0, 5, 0, 0}) {
		t.Errorf("b4 = %v", got)
	}
}

func TestOverPct(t *testing.T) {
	if got := overPct([]float64{10, 18, 18.1, 30}, 18); got != 50 {
		t.Errorf("overPct = %v, want 50 (18 itself is not over)", got)
	}
	if got := overPct(nil, 18); got != 0 {
		t.Errorf("overPct(nil) = %v", got)
	}
}

// ticks builds a record at 100 ms from a compact description: per tick
// the write rate (kB/s), the delay and the set size.
func mkTicks(rows [][3]float64) []Tick {
	out := make([]Tick, len(rows))
	for i, r := range rows {
		out[i] = Tick{T: float64(i) / 10, WriteKBs: r[0], DelayMs: r[1], Members: int(r[2])}
	}
	return out
}

func repeat(row [3]float64, n int) [][3]float64 {
	out := make([][3]float64, n)
	for i := range out {
		out[i] = row
	}
	return out
}

func TestReleases(t *testing.T) {
	on := [3]float64{30000, 8, 3}
	cat := func(parts ...[][3]float64) [][3]float64 {
		var out [][3]float64
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rows [][3]float64
		want []Release
	}{
		{"clears at once", cat(repeat(on, 10), repeat([3]float64{0, 0, 0}, 30)),
			[]Release{{StopS: 0.9, ClearS: 0.1, UnthrottledS: 0.1}}},
		{"delay decays, set leaves later", cat(repeat(on, 10), repeat([3]float64{0, 0, 3}, 5), repeat([3]float64{0, 0, 0}, 25)),
			[]Release{{StopS: 0.9, ClearS: 0.6, UnthrottledS: 0.1}}},
		{"lingers 3 s", cat(repeat(on, 10), repeat([3]float64{0, 5, 3}, 30), repeat([3]float64{0, 0, 0}, 5)),
			[]Release{{StopS: 0.9, ClearS: 3.1, UnthrottledS: 3.1}}},
		{"never clears before writers resume", cat(repeat(on, 10), repeat([3]float64{0, 5, 3}, 30), repeat(on, 5)),
			[]Release{{StopS: 0.9, ClearS: -1, UnthrottledS: -1}}},
		{"writers resume before the limit: cut short, not judged", cat(repeat(on, 10), repeat([3]float64{0, 0, 3}, 17), repeat(on, 5)),
			[]Release{{StopS: 0.9, ClearS: -1, UnthrottledS: 0.1, CutShortS: 1.7}}},
		{"a hiccup is no stop", cat(repeat(on, 10), repeat([3]float64{0, 5, 3}, 3), repeat(on, 10)), nil},
		{"a stop at the very end cannot be judged", cat(repeat(on, 10), repeat([3]float64{0, 5, 3}, 5)), nil},
		{"two stops", cat(repeat(on, 5), repeat([3]float64{0, 0, 0}, 20), repeat(on, 5), repeat([3]float64{0, 2, 1}, 4), repeat([3]float64{0, 0, 0}, 20)),
			[]Release{{StopS: 0.4, ClearS: 0.1, UnthrottledS: 0.1}, {StopS: 2.9, ClearS: 0.5, UnthrottledS: 0.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := releases(mkTicks(tc.rows))
			if len(got) != len(tc.want) {
				t.Fatalf("releases = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if math.Abs(got[i].StopS-tc.want[i].StopS) > 1e-9 || got[i].ClearS != tc.want[i].ClearS || got[i].UnthrottledS != tc.want[i].UnthrottledS || got[i].CutShortS != tc.want[i].CutShortS {
					t.Errorf("release %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestSummarizeReleases(t *testing.T) {
	s := summarizeReleases([]Release{{ClearS: 0.5, UnthrottledS: 0.2}, {ClearS: 1.9, UnthrottledS: 0.3}})
	if !s.WithinLimit || s.MaxClearS != 1.9 || s.MaxUnthrottledS != 0.3 || s.Stops != 2 {
		t.Errorf("summary = %+v", s)
	}
	s = summarizeReleases([]Release{{ClearS: 0.5}, {ClearS: 2.1}})
	if s.WithinLimit {
		t.Errorf("2.1 s is over the %g s limit: %+v", ReleaseLimitS, s)
	}
	s = summarizeReleases([]Release{{ClearS: -1, UnthrottledS: -1}, {ClearS: 0.5, UnthrottledS: 0.5}})
	if s.WithinLimit || s.MaxClearS != -1 {
		t.Errorf("a stop that never cleared must fail: %+v", s)
	}
	s = summarizeReleases([]Release{{ClearS: -1, UnthrottledS: 0.1, CutShortS: 1.7}, {ClearS: 1.6, UnthrottledS: 0.2}})
	if !s.WithinLimit || s.MaxClearS != 1.6 || s.Stops != 1 || s.CutShort != 1 {
		t.Errorf("a stop cut short by a writer is counted apart, not judged: %+v", s)
	}
}

func TestJudgesRelease(t *testing.T) {
	for _, tc := range []struct {
		c    Control
		want bool
	}{
		{Control{Controller: "none"}, false},
		{Control{Controller: "none", Policy: "manual"}, false},
		{Control{Controller: "pid", ThresholdMs: 15}, true},
		{Control{Controller: "pid", ThresholdMs: 15, Policy: "read-over-write"}, true},
		{Control{Controller: "thesis", ThresholdMs: 15}, true},
		{Control{Controller: "pid", ThresholdMs: 15, Policy: "manual"}, false},
		{Control{Controller: "thesis", ThresholdMs: 15, Policy: "manual"}, false},
	} {
		if got := judgesRelease(tc.c); got != tc.want {
			t.Errorf("judgesRelease(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
}

func TestTicksOfAndDelayStats(t *testing.T) {
	t0 := 1000.0
	recs := []status.Record{
		{TS: 999.9, Resources: []status.RecordResource{{SignalMs: 5}}},
		{TS: 1000.1, HoldErrorMaxMs: 3.5, Resources: []status.RecordResource{{SignalMs: 20, DelayMs: 4, Members: 3}},
			Consumers: []status.Consumer{{Device: "loop1", Addr: "a", WriteKBs: 10000}, {Device: "loop2", Addr: "b", WriteKBs: 20000},
				{WriteKBs: 0}}},
		{TS: 1000.2, Resources: []status.RecordResource{{SignalMs: 18, DelayMs: 0, Members: 3, RawMs: 2, Reads: 5}, {RawMs: 6, Reads: 2, MeanMs: 5}},
			Consumers: []status.Consumer{{WriteKBs: 15000}}},
	}
	ts := ticksOf(recs, t0)
	if len(ts) != 3 || math.Abs(ts[0].T+0.1) > 1e-9 || ts[1].WriteKBs != 30000 || ts[1].DelayMs != 4 || ts[1].Members != 3 {
		t.Fatalf("ticks = %+v", ts)
	}
	if ts[2].RawMs != 6 || ts[2].Reads != 2 || ts[2].MeanMs != 5 {
		t.Errorf("tick %+v: want the largest raw signal, 6 ms, and its resource's 2 reads of 5 ms", ts[2])
	}
	ds := delayStats(ts)
	if ds.HoldErrorMaxMs != 3.5 || ds.HoldErrorOver2Pct != 50 {
		t.Errorf("delayStats = %+v, want hold error max 3.5 ms, over 2 ms in 50 %% of the on ticks", ds)
	}
	if ds.Mean != 2 || ds.Max != 4 || ds.ThrottledPct != 50 {
		t.Errorf("delayStats = %+v, want mean 2, max 4, throttled 50 %% of the 2 on ticks", ds)
	}
}

func TestParseNstat(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "nstat-b3.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseNstat(b)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	if _, ok := m["TcpExtTCPLossProbes"]; !ok || m["TcpOutSegs"] == 0 {
		t.Errorf("fixture lacks counters: %v", m)
	}
	if m, err := parseNstat([]byte(`{"kernel":{"TcpRetransSegs":17}}`)); err != nil || m["TcpRetransSegs"] != 17 {
		t.Errorf("17: %v, %v", m, err)
	}
	for _, bad := range []string{"", "#kernel\nTcpRetransSegs 0 0.0\n", `{"kernel":{}}`} {
		if _, err := parseNstat([]byte(bad)); err == nil {
			t.Errorf("parseNstat(%q) accepted bad output", bad)
		}
	}
}

func TestNstatCounterAndDiff(t *testing.T) {
	c := nstatCounter{run: func(_ context.Context, ns string, argv ...string) ([]byte, error) {
		if strings.Join(argv, " ") != "nstat -asz -j" {
			t.Errorf("argv = %v", argv)
		}
		if ns == "sanqos-b3" {
			return []byte(`{"kernel":{"TcpRetransSegs":5,"TcpExtTCPLossProbes":4}}`), nil
		}
		return []byte(`{"kernel":{"TcpRetransSegs":1}}`), nil
	}}
	got, err := c.Counters(context.Background(), []string{"sanqos-b2", "sanqos-b3"})
	if err != nil || got["sanqos-b2"]["TcpRetransSegs"] != 1 || got["sanqos-b3"]["TcpExtTCPLossProbes"] != 4 {
		t.Fatalf("Counters = %v, %v", got, err)
	}
	failing := nstatCounter{run: func(context.Context, string, ...string) ([]byte, error) {
		return nil, errors.New("exit status 1")
	}}
	if _, err := failing.Counters(context.Background(), []string{"sanqos-b2"}); err == nil || !strings.Contains(err.Error(), "sanqos-b2") {
		t.Errorf("a failing nstat must be an error naming the namespace: %v", err)
	}
	d := counterDiff(map[string]map[string]int64{"a": {"TcpRetransSegs": 3, "X": 1}, "b": {"TcpRetransSegs": 10}},
		map[string]map[string]int64{"a": {"TcpRetransSegs": 3, "X": 2}, "b": {"TcpRetransSegs": 14, "Y": 2}})
	want := map[string]map[string]int64{"a": {"X": 1}, "b": {"TcpRetransSegs": 4, "Y": 2}}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("diff = %v, want %v", d, want)
	}
	if r := counter(d, "TcpRetransSegs"); r["a"] != 0 || r["b"] != 4 {
		t.Errorf("counter = %v", r)
	}
}

func testView() labView {
	hs := []labHost{
		{name: "b2", ns: "sanqos-b2", addr: "10.213.0.242", loop: "loop3"},
		{name: "b3", ns: "sanqos-b3", addr: "10.213.0.243", loop: "loop4"},
		{name: "b4", ns: "sanqos-b4", addr: "10.213.0.244", loop: "loop5"},
		{name: "b5", ns: "sanqos-b5", addr: "10.213.0.245", loop: "loop6"},
	}
	return labView{port: 3260, controlPort: 2601, reader: hs[0], writers: hs[1:], hosts: hs}
}

// The configuration the experiments write must be one the daemon's own
// loader accepts, with the values the run asked for.
func TestDaemonConfigLoads(t *testing.T) {
	for _, c := range []Control{
		{Controller: "none"},
		{Controller: "pid", ThresholdMs: 10},
		{Controller: "thesis", ThresholdMs: 15},
		{Controller: "pid", ThresholdMs: 20, Policy: "manual"},
		{Controller: "pid", ThresholdMs: 1.5, Signal: "p95"},
	} {
		t.Run(c.label(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sanqos.toml")
			g := Gains{Kp: 0.4, Ti: 800 * time.Millisecond}
			if err := os.WriteFile(path, []byte(daemonConfig(c, g, testView(), "/tmp/rec.jsonl")), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatalf("the daemon would refuse the experiment's configuration: %v", err)
			}
			if cfg.Controller != c.Controller || cfg.Backend != "nfqueue" || cfg.Discovery.Adapter != "tgt" ||
				cfg.Discovery.TgtControlPort != 2601 || cfg.Record != "/tmp/rec.jsonl" {
				t.Errorf("config = %+v", cfg)
			}
			if cfg.PID.Kp != 0.4 || cfg.PID.Ti.Duration != 800*time.Millisecond || cfg.PID.Td.Duration == 0 {
				t.Errorf("gains = %+v, want Kp 0.4, Ti 800ms and the default Td", cfg.PID)
			}
			if want := c.Signal; (want != "" && cfg.Signal != want) || (want == "" && cfg.Signal != "mean") {
				t.Errorf("signal = %q, want %q (or mean)", cfg.Signal, want)
			}
			if c.ThresholdMs > 0 && cfg.Threshold.Duration != time.Duration(c.ThresholdMs*float64(time.Millisecond)) {
				t.Errorf("threshold = %v, want %g ms", cfg.Threshold, c.ThresholdMs)
			}
			if c.Policy == "manual" {
				if cfg.Policy != "manual" || !reflect.DeepEqual(cfg.Manual.Protected, []string{"10.213.0.242"}) ||
					!reflect.DeepEqual(cfg.Manual.Throttle, []string{"10.213.0.243", "10.213.0.244", "10.213.0.245"}) {
					t.Errorf("manual = %q %+v", cfg.Policy, cfg.Manual)
				}
			} else if cfg.Policy != "read-over-write" {
				t.Errorf("policy = %q", cfg.Policy)
			}
		})
	}
}

func TestDaemonArgs(t *testing.T) {
	args := daemonArgs("/x/sanqos.toml", "/x/rec")
	if got, want := strings.Join(args, " "), "run --config /x/sanqos.toml --socket /run/sanqos-exp/ctl.sock --record /x/rec"; got != want {
		t.Errorf("daemonArgs = %q, want %q", got, want)
	}
}

func TestChecks(t *testing.T) {
	th := 15.0
	on := Workload{On: "32m"}
	s := &Summary{Runs: []*RunResult{
		{Name: "none", Workload: on, OverRefMs: 15, WaitMs: Stats{P95: 45}},
		{Name: "pid-15ms", Workload: on, ThresholdMs: &th, OverRefMs: 15, WaitMs: Stats{P95: 17.5}, OverThresholdPct: 4,
			ReaderKBs: 255, ReaderGoalKBs: 262.144, Retransmits: 0,
			Release: &ReleaseSummary{Stops: 5, MaxClearS: 1.2, WithinLimit: true}},
		{Name: "pid-10ms", Workload: on, ThresholdMs: &[]float64{10}[0], OverRefMs: 10, WaitMs: Stats{P95: 14}, OverThresholdPct: 20,
			ReaderKBs: 200, ReaderGoalKBs: 262.144, Retransmits: 3,
			Release: &ReleaseSummary{Stops: 5, MaxClearS: -1}},
	}}
	got := map[string]bool{}
	for _, c := range checks(s) {
		got[c.Run+"/"+c.What] = c.OK
	}
	want := map[string]bool{
		"none/uncontrolled p95 wait": true,
		"pid-15ms/p95 wait":          true, "pid-15ms/seconds above 18 ms": true, "pid-15ms/TCP retransmissions (initiators)": true,
		"pid-15ms/smalljob throughput": true, "pid-15ms/throttle cleared after writers stop": true,
		"pid-10ms/p95 wait": false, "pid-10ms/seconds above 12 ms": false, "pid-10ms/TCP retransmissions (initiators)": false,
		"pid-10ms/smalljob throughput": false, "pid-10ms/throttle cleared after writers stop": false,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("checks = %v\nwant %v", got, want)
	}
}

func TestRebase(t *testing.T) {
	in := `<img src="compare.png"><a href="pid-15ms.png">x</a><a href="#sim">y</a><a href="/abs">z</a><a href="http://e">w</a>`
	want := `<img src="sim/compare.png"><a href="sim/pid-15ms.png">x</a><a href="#sim">y</a><a href="/abs">z</a><a href="http://e">w</a>`
	if got := rebase(in, "sim"); got != want {
		t.Errorf("rebase = %s\nwant %s", got, want)
	}
}

func TestLeftoverDaemons(t *testing.T) {
	root := t.TempDir()
	procs := map[string]string{
		"101":  "/usr/bin/sanqos\x00run\x00--config\x00/x.toml\x00--socket\x00/run/sanqos-exp/ctl.sock\x00",
		"102":  "sanqos\x00run\x00--socket=/run/sanqos-exp/ctl.sock\x00",
		"103":  "sanqos\x00run\x00--socket\x00/run/sanqos/sanqos.sock\x00", // somebody else's daemon
		"104":  "vim\x00/run/sanqos-exp/ctl.sock\x00",
		"self": "x",
	}
	for pid, cl := range procs {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cmdline"), []byte(cl), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := leftoverDaemons(root)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !reflect.DeepEqual(got, []int{101, 102}) {
		t.Errorf("leftoverDaemons = %v, want [101 102]", got)
	}
}

// readFixture reads a captured per-second log.
func readFixture(t *testing.T, name string) []iolog.Record {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := iolog.ReadRecords(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestAnalysisOfARealRun analyses the logs of a real fig5.11 --short run
// at pid 15 ms (reader started at Unix 1795291208, writers 10 s later) and
// checks that the two independent sources agree: the stops of the writers
// the daemon's record shows are the ends of the bursts in the load
// generators' logs.
func TestAnalysisOfARealRun(t *testing.T) {
	const t0 = 1795291208.0
	var ws []WriterLog
	for _, h := range []string{"b3", "b4", "b5"} {
		ws = append(ws, WriterLog{Host: h, Offset: 10, Records: readFixture(t, "pid15-writers-"+h+".jsonl")})
	}
	tl := buildTimeline(readFixture(t, "pid15-reader-b2.jsonl"), ws)
	if len(tl.T) < 115 || len(tl.T) > 125 {
		t.Fatalf("timeline has %d seconds, the run had 120", len(tl.T))
	}
	// Ends of bursts in the load generators' logs.
	var ends []float64
	for i := 1; i < len(tl.Active); i++ {
		if tl.Active[i-1] && !tl.Active[i] {
			ends = append(ends, tl.T[i-1])
		}
	}
	recs := readGzipRecord(t, "pid15-record.jsonl.gz")
	rs := releases(ticksOf(recs, t0))
	if len(rs) != len(ends) {
		t.Fatalf("the record shows %d stops %v, the load generators %d burst ends %v", len(rs), rs, len(ends), ends)
	}
	for i, r := range rs {
		// A burst's last active second ends within a second after the
		// last on tick (the second is counted active if any of it was).
		if d := ends[i] - r.StopS; d < -0.2 || d > 1.5 {
			t.Errorf("stop %d: record %.1f s, logs %.0f s", i, r.StopS, ends[i])
		}
	}
	waits := tl.activeWaits()
	if len(waits) < 60 {
		t.Errorf("only %d seconds with writers active", len(waits))
	}
	// The reader was held near the threshold while writers were active,
	// and was fast while they were not.
	var idle []float64
	for i, a := range tl.Active {
		if !a && tl.T[i] > 1 && !math.IsNaN(tl.WaitMs[i]) {
			idle = append(idle, tl.WaitMs[i])
		}
	}
	if s, q := statsOf(waits), statsOf(idle); !(s.P50 > 12 && s.P50 < 18 && q.P50 < 10) {
		t.Errorf("wait p50 %.1f ms with writers, %.1f ms without: not the run captured", s.P50, q.P50)
	}
}

func readGzipRecord(t *testing.T, name string) []status.Record {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "record.jsonl")
	out, err := os.Create(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	out.Close()
	recs, err := readRecord(tmp)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A load generator from another build refuses the lab's flags: the error
// says which binary and what it refused, not the tail of its flag list.
func TestLoadUsageErrorNamesTheBinary(t *testing.T) {
	errf := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(errf)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("sh", "-c", "echo 'flag provided but not defined: -name' >&2; echo 'Usage: sanqos-iscsiload ...' >&2; echo '  -verify  check data' >&2; exit 2")
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &loadProc{host: "b3", cmd: cmd, errf: errf, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	err = p.wait(context.Background())
	if err == nil || !strings.Contains(err.Error(), "flag provided but not defined: -name") ||
		!strings.Contains(err.Error(), "make build") || strings.Contains(err.Error(), "-verify") {
		t.Errorf("error %v, want the refused flag, the binary and 'make build', without the flag list", err)
	}
}

// signalHold judges the seconds in which the set had members by their
// mean raw signal against 1.2 × threshold, and says which source measured.
func TestSignalHold(t *testing.T) {
	var ticks []Tick
	for i := range 100 { // 10 s; seconds 3 and 7 are over 1.2 × 1.5 ms
		raw := 1.0
		if s := i / 10; s == 3 || s == 7 {
			raw = 2.5
		}
		ticks = append(ticks, Tick{T: float64(i) / 10, RawMs: raw, Members: 3, Source: "ebpf"})
	}
	ticks = append(ticks, Tick{T: 10.5, RawMs: 50, Members: 0, Source: "ebpf"}) // no writers: not judged
	h := signalHold(ticks, "p95", 1.5)
	if h.Seconds != 10 || h.WithinPct != 80 || h.Source != "ebpf" || math.Abs(h.LimitMs-1.8) > 1e-9 {
		t.Fatalf("%+v: want 10 seconds, 80 %% within 1.8 ms, from ebpf", h)
	}
	for i := range ticks {
		ticks[i].Source = "diskstats"
	}
	if h := signalHold(ticks, "p95", 1.5); h.Source != "diskstats" {
		t.Fatalf("source %q, want diskstats", h.Source)
	}
}
