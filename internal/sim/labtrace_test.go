package sim

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// The plant's calibration against the lab's recorded traces: the static
// throttles of `sanqos lab run frontier --short` (the fig5.11 workload,
// 35 s runs with the writers from 5 s to 30 s, uncontrolled and at fixed
// write delays), each kept in testdata/lab/frontier-short/ as the
// per-second trace the lab's logs hold — the reader's mean wait and the
// writers' MB/s — and compared with the simulator's run of the same
// workload by one function (traceStats). The controller is not
// calibrated here: its law changes, the plant's response to a fixed
// delay does not.
//
// To record the traces anew from a lab run's output directory:
//
//	sanqos lab run frontier --short --out /tmp/fs
//	go test ./internal/sim -run TestLabTraces -lab-traces /tmp/fs/frontier
var labTracesFrom = flag.String("lab-traces", "", "rewrite testdata/lab/frontier-short from this frontier --short output directory")

const labTraceDir = "testdata/lab/frontier-short"

// maxPessimism is how far over the lab's recorded p95 the simulator's
// may be at a fixed delay of 10 ms or more (the recorded gap is 19–29 %).
const maxPessimism = 35.0

// traceSecond is one second of a run: its end, the reader's mean wait
// (NaN: no read completed) and the writers' MB/s.
type traceSecond struct {
	T, ReadMs, WriteMBs float64
}

// traceStats is what the lab reports of a run, from its trace: over the
// seconds in which the writers wrote, the reader's p95 wait and the
// writers' mean MB/s.
func traceStats(tr []traceSecond) (p95, mbs float64, n int) {
	var waits []float64
	var sum float64
	for _, s := range tr {
		if s.WriteMBs <= 0 {
			continue
		}
		n++
		sum += s.WriteMBs
		if !math.IsNaN(s.ReadMs) {
			waits = append(waits, s.ReadMs)
		}
	}
	if n == 0 {
		return math.NaN(), 0, 0
	}
	return iolog.Percentile(waits, 95), sum / float64(n), n
}

// TestLabTraces holds the lab scenario to the lab's recorded static
// throttles, averaged over seeds 1–4 (a recorded run is one run; the
// seeds average which threads collide on a spindle): the writers' MB/s
// within 10 % of the lab's at every fixed delay, and the reader's p95
// within 10 % where the writers are held by less than 10 ms. Under
// heavier throttles the simulator's reader waits longer than the lab's
// recorded one (by about the 1.3 ms it waits longer alone: see "The
// simulator" in docs/results.md), so there it is held to being
// conservative — never more than 10 % under the lab, which would make
// it promise what the lab does not hold — and at most maxPessimism over.
func TestLabTraces(t *testing.T) {
	if *labTracesFrom != "" {
		recordLabTraces(t, *labTracesFrom)
	}
	files, err := filepath.Glob(filepath.Join(labTraceDir, "*.csv"))
	if err != nil || len(files) < 4 {
		t.Fatalf("lab traces in %s: %v, %d files; want the uncontrolled run and at least three fixed delays", labTraceDir, err, len(files))
	}
	for _, f := range files {
		fixed, lab := readLabTrace(t, f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			labP95, labMBs, n := traceStats(lab)
			if n < 10 {
				t.Fatalf("%s: %d seconds with writers, want a whole run", f, n)
			}
			const seeds = 4
			var p95, mbs float64
			for seed := int64(1); seed <= seeds; seed++ {
				cfg := DefaultConfig()
				cfg.Scenario, cfg.Seed = LabScenario(), seed
				cfg.Scenario.Start, cfg.Scenario.Tail = 5*time.Second, 5*time.Second
				cfg.Controller, cfg.FixedDelayMs, cfg.Duration = "none", fixed, 35*time.Second
				var tr []traceSecond
				for _, s := range run(t, cfg).Seconds {
					tr = append(tr, traceSecond{s.T, s.ReadMs, s.WriteMBs})
				}
				sp, sm, _ := traceStats(tr)
				p95 += sp / seeds
				mbs += sm / seeds
			}
			dp, dm := 100*(p95/labP95-1), 100*(mbs/labMBs-1)
			t.Logf("fixed %g ms: p95 %.1f ms (lab %.1f, %+.1f %%), writers %.1f MB/s (lab %.1f, %+.1f %%)", fixed, p95, labP95, dp, mbs, labMBs, dm)
			hi := 10.0
			if fixed >= 10 {
				hi = maxPessimism
			}
			if dp < -10 || dp > hi || math.Abs(dm) > 10 {
				t.Errorf("fixed %g ms: the simulator is p95 %+.1f %%, MB/s %+.1f %% from the lab, want p95 within -10 … +%g %% and MB/s within 10 %%", fixed, dp, dm, hi)
			}
		})
	}
}

// readLabTrace reads a trace file: "# fixed_ms N", a header, then
// t,read_ms,write_mb_s per second ("" for a second without reads).
func readLabTrace(t *testing.T, path string) (fixedMs float64, tr []traceSecond) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	fixedMs = -1
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# fixed_ms "); ok {
			if fixedMs, err = strconv.ParseFloat(v, 64); err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			continue
		}
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "t,") {
			continue
		}
		var s traceSecond
		fs := strings.Split(line, ",")
		if len(fs) != 3 {
			t.Fatalf("%s: %q: want t,read_ms,write_mb_s", path, line)
		}
		s.ReadMs = math.NaN()
		s.T, err = strconv.ParseFloat(fs[0], 64)
		if err == nil && fs[1] != "" {
			s.ReadMs, err = strconv.ParseFloat(fs[1], 64)
		}
		if err == nil {
			s.WriteMBs, err = strconv.ParseFloat(fs[2], 64)
		}
		if err != nil {
			t.Fatalf("%s: %q: %v", path, line, err)
		}
		tr = append(tr, s)
	}
	if fixedMs < 0 {
		t.Fatalf("%s: no \"# fixed_ms\" line", path)
	}
	return fixedMs, tr
}

// recordLabTraces writes a trace file for each static run of a frontier
// --short output directory: the reader's per-second mean wait and the
// sum of the writer hosts' MB/s, on the reader's clock (the writers
// start the workload's lead later).
func recordLabTraces(t *testing.T, dir string) {
	t.Helper()
	runs, err := filepath.Glob(filepath.Join(dir, "*", "result.json"))
	if err != nil || len(runs) == 0 {
		t.Fatalf("no runs (*/result.json) in %s: %v", dir, err)
	}
	if err := os.MkdirAll(labTraceDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, res := range runs {
		var r struct {
			Name         string  `json:"name"`
			ThresholdMs  float64 `json:"threshold_ms"`
			FixedDelayMs float64 `json:"fixed_delay_ms"`
			Workload     struct {
				Lead time.Duration `json:"lead"`
			} `json:"workload"`
		}
		readJSON(t, res, &r)
		if r.ThresholdMs > 0 {
			continue // a controller's run: not the plant's
		}
		runDir := filepath.Dir(res)
		reads := map[float64]float64{}
		for _, rec := range threadZero(t, filepath.Join(runDir, "reader-b2.jsonl")) {
			if rec.IOs > 0 {
				reads[rec.T] = rec.Lat.Mean
			}
		}
		writes := map[float64]float64{}
		hosts, _ := filepath.Glob(filepath.Join(runDir, "writers-*.jsonl"))
		for _, h := range hosts {
			for _, rec := range threadZero(t, h) {
				writes[rec.T+r.Workload.Lead.Seconds()] += rec.MBs
			}
		}
		var ts []float64
		for s := range reads {
			ts = append(ts, s)
		}
		for s := range writes {
			if _, ok := reads[s]; !ok {
				ts = append(ts, s)
			}
		}
		sort.Float64s(ts)
		var b strings.Builder
		fmt.Fprintf(&b, "# sanqos lab run frontier --short, run %s, recorded %s\n# fixed_ms %g\nt,read_ms,write_mb_s\n",
			r.Name, time.Now().UTC().Format("2006-01-02"), r.FixedDelayMs)
		for _, s := range ts {
			read := ""
			if v, ok := reads[s]; ok {
				read = strconv.FormatFloat(v, 'f', 3, 64)
			}
			fmt.Fprintf(&b, "%g,%s,%.3f\n", s, read, writes[s])
		}
		out := filepath.Join(labTraceDir, r.Name+".csv")
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("recorded %s (%d seconds)", out, len(ts))
	}
}

// threadZero is a load generator log's whole-job per-second lines.
func threadZero(t *testing.T, path string) []iolog.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := iolog.ReadRecords(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return iolog.Select(recs, "interval", 0, "")
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
