package experiments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/datapath"
)

// TestDatapathRegistered: the experiment is listed, needs no lab and
// keeps to the brief's durations.
func TestDatapathRegistered(t *testing.T) {
	x, err := Lookup("datapath")
	if err != nil {
		t.Fatal(err)
	}
	if x.NeedsLab() {
		t.Error("datapath brings up a lab; it needs only its namespaces")
	}
	if d := x.Estimate(true); d > 2*time.Minute {
		t.Errorf("--short takes about %v, want at most 2 minutes", d)
	}
	if d := x.Estimate(false); d > 10*time.Minute {
		t.Errorf("in full it takes about %v, want at most 10 minutes", d)
	}
}

// fakeDatapath is a measured result of none, nfqueue and htb.
func fakeDatapath() *DatapathResult {
	ms := time.Millisecond
	holds := []time.Duration{ms, 5 * ms}
	rtt := func(base, hold time.Duration, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = base + hold + time.Duration(i)*time.Microsecond
		}
		return out
	}
	arm := func(held uint64, segs uint32, cpu time.Duration) datapath.BulkArm {
		return datapath.BulkArm{Held: held, BulkResult: datapath.BulkResult{Segs: segs, Bytes: int64(segs) * 1448, Wall: time.Second,
			CPU: datapath.CPUSpan{Busy: cpu, Ours: cpu, Daemon: cpu / 2}}}
	}
	c := &datapath.Cost{
		Config: datapath.CostConfig{Backends: []string{"none", "nfqueue", "htb"}, Holds: holds, Pings: 100, Rounds: 2,
			Bulk: time.Second, ReadDelay: ms, RateCap: "100MB/s"},
		RTT: map[string]map[time.Duration][]time.Duration{
			"none":    {0: rtt(50*time.Microsecond, 0, 200)},
			"nfqueue": {ms: rtt(250*time.Microsecond, ms, 200), 5 * ms: rtt(300*time.Microsecond, 5*ms, 200)},
		},
		Bulk: map[string][]datapath.BulkArm{
			"none":    {arm(0, 30000, time.Second), arm(0, 31000, time.Second)},
			"nfqueue": {arm(3000, 3000, 500*ms), arm(3100, 3100, 520*ms)},
			"htb":     {arm(0, 29000, time.Second), arm(0, 29500, time.Second)},
		},
	}
	even := func(v float64, n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = v * (1 + 0.001*float64(i%3-1))
		}
		return out
	}
	idle := []datapath.Idle{
		{Backend: "nfqueue", Bulk: [2][]float64{even(2e9, 30), even(2e9, 30)}, RR: [2][]float64{even(80e3, 30), even(60e3, 30)}},
		{Backend: "htb", Bulk: [2][]float64{even(2e9, 30), even(2e9, 30)}, RR: [2][]float64{even(80e3, 30), even(80e3, 30)}},
	}
	d := &DatapathResult{Kernel: "6.18.0-test", Backends: c.Config.Backends, IdleArm: time.Second, cost: c, idle: idle,
		Skipped: []Skip{{"edt", "this kernel (6.18.0-test) has no sch_fq; run `make kernel-lab SUITE=datapath`"}}}
	d.fill()
	return d
}

// TestDatapathReport: the rows, the criteria as measured (an idle
// backend 25 % slower misses, an equal one meets), report.md and the
// plots from a result.
func TestDatapathReport(t *testing.T) {
	d := fakeDatapath()
	if len(d.Hold) != 3 || len(d.Bulk) != 3 || len(d.Idle) != 4 {
		t.Fatalf("rows: %d hold, %d bulk, %d idle; want 3, 3, 4", len(d.Hold), len(d.Bulk), len(d.Idle))
	}
	if h := d.Hold[1]; h.Backend != "nfqueue" || h.HoldMs != 1 || h.P50Us < 190 || h.P50Us > 310 {
		t.Errorf("nfqueue's 1 ms hold row %+v: want p50 about 200 µs over the baseline's median", h)
	}
	checks := datapathChecks(d)
	ok := map[string]bool{}
	for _, c := range checks {
		ok[c.Run+"/"+c.What] = c.OK
	}
	if ok["nfqueue/idle overhead, 4 KiB round trips"] || !ok["htb/idle overhead, 4 KiB round trips"] || !ok["all/every packet of the held flows delayed, none early, no retransmitted ping-pong"] {
		t.Errorf("checks %+v: want nfqueue's round trips missed, htb's met, no problem", checks)
	}
	dir := t.TempDir()
	s := &Summary{Experiment: "datapath", Title: "t", Datapath: d, out: dir, Started: time.Now(), Finished: time.Now()}
	if err := writeDatapath(s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"datapath.png", "holdcdf.png", "report.md", "summary.json", "report.html"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"edt skipped: this kernel (6.18.0-test) has no sch_fq", "| nfqueue | 1ms |", "| htb | – |", "**missed**", "![datapath.png](datapath.png)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}
