package experiments

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/lab/iolog"
)

func TestTenantsPlan(t *testing.T) {
	for _, short := range []bool{true, false} {
		runs := tenantsPlan(short)
		if len(runs) != 3 {
			t.Fatalf("short=%v: %d runs, want 3", short, len(runs))
		}
		for _, r := range runs {
			if len(r.c.Tenants) == 0 || r.c.Controller != "pid" {
				t.Errorf("%s: a tenants run needs terms under pid: %+v", r.name, r.c)
			}
		}
		if runs[2].w.TurnReader == 0 || runs[2].c.ThresholdMs <= runs[2].c.Tenants[0].ThresholdMs {
			t.Errorf("the readers run must have turns and a stricter reader: %+v %+v", runs[2].w, runs[2].c)
		}
	}
}

func TestTenantsTOMLParses(t *testing.T) {
	v := labView{hosts: []labHost{{name: "b2", addr: "10.0.0.2"}, {name: "b3", addr: "10.0.0.3"}}}
	s := tenantsTOML([]LabTenant{{Host: "b3", Share: 2, ReserveMBs: 6, CapMBs: 8, ThresholdMs: 10}}, v)
	var got struct {
		Tenants struct {
			Consumer []map[string]any `toml:"consumer"`
		} `toml:"tenants"`
	}
	if _, err := toml.Decode(s, &got); err != nil {
		t.Fatalf("%v in:\n%s", err, s)
	}
	c := got.Tenants.Consumer
	if len(c) != 1 || c[0]["name"] != "b3" || c[0]["reserve"] != "6MB/s" || c[0]["cap"] != "8MB/s" ||
		c[0]["threshold"] != "10ms" || c[0]["share"] != int64(2) || c[0]["match"].([]any)[0] != "10.0.0.3" {
		t.Errorf("got %+v from:\n%s", c, s)
	}
}

func TestTurnReaderArgs(t *testing.T) {
	got, err := turnReaderArgs("smalljob", 15*time.Second)
	if err != nil || strings.Join(got, " ") != "--on 3840k --off 15s" {
		t.Errorf("got %v, %v; want 256 KiB/s × 15 s on, 15 s off", got, err)
	}
	if _, err := turnReaderArgs("seqwrite-64k", time.Second); err == nil {
		t.Error("a job without a rate cannot take turns by bytes")
	}
}

func TestThrottledSeconds(t *testing.T) {
	var ticks []Tick
	for i := 1; i <= 30; i++ { // seconds 1-3, 10 ticks each
		d := 5.0
		if i == 15 { // one free tick in second 2
			d = 0
		}
		ticks = append(ticks, Tick{T: float64(i) / 10, DelayMs: d, Members: 2, Conflict: i > 25})
	}
	got := throttledSeconds(ticks)
	if !got[1] || got[2] || !got[3] || len(got) != 2 {
		t.Errorf("throttled seconds %v, want 1 and 3", got)
	}
	if n := conflictSeconds(ticks); n != 1 {
		t.Errorf("conflict seconds %d, want 1", n)
	}
}

func TestMaxWindowMean(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		n    int
		want float64
	}{
		{nil, 10, 0},
		{[]float64{1, 2, 3}, 10, 2},
		{[]float64{1, 1, 10, 10, 1}, 2, 10},
		{[]float64{4, 0, 4, 0}, 2, 2},
	} {
		if got := maxWindowMean(tc.xs, tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("maxWindowMean(%v, %d) = %g, want %g", tc.xs, tc.n, got, tc.want)
		}
	}
}

func TestTenantWritersAndChecks(t *testing.T) {
	// Seconds 1-10; throttled 3-10; b3:b4:b5 at 1:2:4 while throttled.
	tl := Timeline{HostMBs: map[string][]float64{}}
	throttled := map[int]bool{}
	for k := 1; k <= 10; k++ {
		tl.T = append(tl.T, float64(k))
		f := 1.0
		if k >= 3 {
			throttled[k] = true
		} else {
			f = 3 // unthrottled seconds do not count in the split
		}
		tl.HostMBs["b3"] = append(tl.HostMBs["b3"], 1*f)
		tl.HostMBs["b4"] = append(tl.HostMBs["b4"], 2*f)
		tl.HostMBs["b5"] = append(tl.HostMBs["b5"], 4.4)
	}
	c := Control{Tenants: []LabTenant{{Host: "b3", Share: 1}, {Host: "b4", Share: 2}, {Host: "b5", Share: 4}}}
	ws := tenantWriters(tl, throttled, c, 0, 10)
	if len(ws) != 3 || ws[0].Host != "b3" || math.Abs(ws[2].WantPct-100*4.0/7) > 0.01 {
		t.Fatalf("writers %+v", ws)
	}
	// b5: 4.4 of 7.4 = 59.5 % vs 57.1 % wanted: within 10 %.
	tr := &TenantResult{ThrottledSeconds: len(throttled), Writers: ws}
	for _, ch := range tenantWriterChecks("r", tr) {
		if !ch.OK {
			t.Errorf("check failed: %+v", ch)
		}
	}
	// b5 at twice its share breaks it.
	for i := range tl.HostMBs["b5"] {
		tl.HostMBs["b5"][i] = 12
	}
	tr.Writers = tenantWriters(tl, throttled, c, 0, 10)
	if chs := tenantWriterChecks("r", tr); chs[2].OK {
		t.Errorf("b5 at 12 of 15 MB/s passed its 4/7 share: %+v", chs[2])
	}
}

func TestTenantReservationAndCap(t *testing.T) {
	tl := Timeline{HostMBs: map[string][]float64{"b3": {6, 6, 5, 6, 6, 6, 6, 6, 6, 6}, "b5": {2, 2, 2.2, 2, 2, 2, 2, 2, 2, 2, 2.5}}}
	c := Control{Tenants: []LabTenant{{Host: "b3", ReserveMBs: 6}, {Host: "b5", CapMBs: 2}}}
	ws := tenantWriters(tl, nil, c, 0, 11)
	if ws[0].ReservedPct != 90 {
		t.Errorf("b3 reserved %g %% of seconds, want 90", ws[0].ReservedPct)
	}
	chs := tenantWriterChecks("r", &TenantResult{Writers: ws})
	if chs[0].OK {
		t.Errorf("90 %% of seconds at the reservation passed: %+v", chs[0])
	}
	if !chs[1].OK {
		t.Errorf("a cap held within 5 %% over 10 s failed: %+v", chs[1])
	}
	chs = tenantWriterChecks("r", &TenantResult{Writers: ws, ConflictSeconds: 3})
	if !chs[0].OK {
		t.Errorf("a reported conflict excuses the reservation: %+v", chs[0])
	}
}

func TestTenantReadersJudgedWhileStrictest(t *testing.T) {
	rec := func(k int, ms float64) iolog.Record {
		return iolog.Record{Kind: iolog.KindInterval, T: float64(k), Op: iolog.OpRead, Dur: 1, IOs: 30, Lat: iolog.Latency{Mean: ms}}
	}
	var b2, b3 []iolog.Record
	for k := 1; k <= 10; k++ { // b2 reads 1-10 at 18 ms; b3 reads 5-6 at 9 ms
		b2 = append(b2, rec(k, 18))
	}
	b3 = append(b3, rec(5, 9), rec(6, 9))
	c := Control{ThresholdMs: 20, Tenants: []LabTenant{{Host: "b3", ThresholdMs: 10}}}
	rs, _ := tenantReaders(map[string][]iolog.Record{"b2": b2, "b3": b3}, nil, c)
	// b3 counts as active for 3 s after its last read: b2 is judged in
	// 2-4 and 9-10 (its first second is its onset); b3 in 6, its first
	// second 5 an onset.
	if rs[0].Host != "b2" || rs[0].Seconds != 5 || rs[0].OnsetSeconds != 1 || rs[0].ThresholdMs != 20 ||
		rs[1].Seconds != 1 || rs[1].P95Ms != 9 || rs[1].OnsetSeconds != 1 || rs[1].OnsetMaxMs != 9 {
		t.Errorf("readers %+v", rs)
	}
}

// The daemon reads the lab's terms as its own [tenants]: the file the lab
// writes loads, and each host's terms arrive under its name.
func TestDaemonConfigCarriesTenants(t *testing.T) {
	v := labView{port: 3260, controlPort: 3261, hosts: []labHost{{name: "b2", addr: "10.0.0.2"}, {name: "b3", addr: "10.0.0.3"}, {name: "b5", addr: "10.0.0.5"}}}
	c := Control{Controller: "pid", ThresholdMs: 15, Tenants: []LabTenant{{Host: "b3", ReserveMBs: 6}, {Host: "b5", CapMBs: 2, ThresholdMs: 10}}}
	path := filepath.Join(t.TempDir(), "sanqos.toml")
	if err := os.WriteFile(path, []byte(daemonConfig(c, Gains{}, v, "rec.jsonl")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Tenants.Consumer
	if len(got) != 2 || got[0].Name != "b3" || got[0].Match[0] != "10.0.0.3" || got[0].Reserve == nil ||
		got[1].Cap == nil || got[1].Threshold == nil || got[1].Threshold.Duration != 10*time.Millisecond {
		t.Errorf("tenants as the daemon reads them: %+v", got)
	}
}

// The readers' logs of a lab run (tenants --short, readers-10-20ms): b3
// started 15 s after b2 and its log counts from its own start. Lined up,
// the two take turns, so each is judged over its own turns.
func TestTenantReadersOnRecordedTurns(t *testing.T) {
	logs := map[string][]iolog.Record{}
	for _, h := range []string{"b2", "b3"} {
		f, err := os.Open(filepath.Join("testdata", "tenants", "reader-"+h+".jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		logs[h], err = iolog.ReadRecords(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	c := Control{ThresholdMs: 20, Tenants: []LabTenant{{Host: "b3", ThresholdMs: 10}}}
	rs, waits := tenantReaders(logs, map[string]float64{"b3": 15}, c)
	for k := range waits["b3"] {
		if _, both := waits["b2"][k]; both && k%15 > 1 {
			t.Errorf("second %d: both readers read; the turns are not lined up", k)
		}
	}
	if rs[0].Seconds < 30 || rs[1].Seconds < 40 {
		t.Errorf("each reader is judged over its own turns: %+v", rs)
	}
	t.Logf("readers: %+v", rs)
}
