package experiments

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// TestNFSPlan: fig5.11's workload, uncontrolled and pid at 15 ms, 300 s
// in full and 120 s --short, over NFS.
func TestNFSPlan(t *testing.T) {
	x, err := Lookup("nfs")
	if err != nil {
		t.Fatal(err)
	}
	if !x.nfs || x.refMs != 15 {
		t.Fatalf("nfs experiment: %+v", x)
	}
	for short, total := range map[bool]time.Duration{false: 300 * time.Second, true: 120 * time.Second} {
		p := x.plan(short)
		if got := x.RunNames(short); !reflect.DeepEqual(got, []string{"none", "pid-15ms"}) {
			t.Errorf("short=%v: runs %v", short, got)
		}
		for _, r := range p {
			if want := interference(total); r.w != want {
				t.Errorf("short=%v %s: workload %+v, want fig5.11's %+v", short, r.name, r.w, want)
			}
		}
		if p[1].c.Controller != "pid" || p[1].c.ThresholdMs != 15 || p[0].c.Controller != "none" {
			t.Errorf("controls %+v %+v", p[0].c, p[1].c)
		}
	}
}

// TestNFSDaemonConfig: the daemon of an NFS run is configured as a user
// configures NFS — socket discovery, port 2049, attribution auto — and
// its own loader accepts that (so it takes the wire for shared devices).
func TestNFSDaemonConfig(t *testing.T) {
	v := testView()
	v.nfs, v.port = true, 2049
	path := filepath.Join(t.TempDir(), "sanqos.toml")
	c := Control{Controller: "pid", ThresholdMs: 15}
	if err := os.WriteFile(path, []byte(daemonConfig(c, Gains{}, v, "/tmp/rec.jsonl")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatalf("the daemon would refuse the NFS run's configuration: %v", err)
	}
	if cfg.Discovery.Adapter != "socket" || !reflect.DeepEqual(cfg.Ports, []int{2049}) || cfg.Attribution != "auto" ||
		len(cfg.Discovery.Exports) != 0 || cfg.Backend != "nfqueue" || cfg.Direction != "write" {
		t.Errorf("config = %+v", cfg)
	}
	if cfg.Discovery.TgtControlPort != config.Default().Discovery.TgtControlPort {
		t.Errorf("tgt control port %d set for an NFS run", cfg.Discovery.TgtControlPort)
	}
	// NFS's split (256 on 2049) is the data path's default: the run
	// must not override it.
	if len(cfg.SmallSegment) != 0 {
		t.Errorf("small_segment %v set, want NFS's default split", cfg.SmallSegment)
	}
}

// TestSetMembership: a host is in the set in the ticks where a consumer
// of its address is throttleable; a controlled run whose reader was is
// a missed target.
func TestSetMembership(t *testing.T) {
	v := testView()
	rec := func(ts float64, throttleable ...string) status.Record {
		r := status.Record{TS: ts}
		for _, h := range v.hosts {
			r.Consumers = append(r.Consumers, status.Consumer{Addr: h.addr, Device: "loop7",
				Throttleable: strings.Contains(strings.Join(throttleable, " "), h.addr)})
		}
		return r
	}
	recs := []status.Record{rec(100.0), rec(100.1, "10.213.0.243"), rec(100.2, "10.213.0.243", "10.213.0.242"), rec(100.3, "10.213.0.243")}
	got := setMembership(recs, v.reader, 99.5)
	if got != (SetMembership{Host: "b2", Addr: "10.213.0.242", Ticks: 1, Of: 4, FirstS: 0.7}) {
		t.Errorf("reader %+v", got)
	}
	if w := setMembership(recs, v.writers[0], 99.5); w.Ticks != 3 || w.FirstS != 0.6 {
		t.Errorf("writer %+v", w)
	}
	if n := setMembership(recs, v.writers[1], 99.5); n.Ticks != 0 || n.FirstS != -1 {
		t.Errorf("idle host %+v", n)
	}
	th := 15.0
	never := SetMembership{Host: "b2", Addr: "10.213.0.242", Of: 4, FirstS: -1}
	s := &Summary{Runs: []*RunResult{
		{Name: "none", ReaderInSet: &got},
		{Name: "pid-15ms", ThresholdMs: &th, ReaderInSet: &got},
		{Name: "pid-15ms-b", ThresholdMs: &th, ReaderInSet: &never},
	}}
	cs := setChecks(s)
	if len(cs) != 2 || cs[0].OK || !cs[1].OK || !strings.Contains(cs[0].Got, "1 of 4 ticks, first at 0.7 s") {
		t.Errorf("checks %+v", cs)
	}
}

// TestReportShowsTheSet: the report has the throttleable set's table.
func TestReportShowsTheSet(t *testing.T) {
	in := SetMembership{Host: "b2", Addr: "10.213.0.242", Of: 1200, FirstS: -1}
	th := 15.0
	s := &Summary{Experiment: "nfs", Lab: LabInfo{NFS: "nfs://10.213.0.253/x"}, Runs: []*RunResult{{Name: "pid-15ms", ThresholdMs: &th,
		ReaderInSet: &in, WritersInSet: []SetMembership{{Host: "b3", Addr: "10.213.0.243", Ticks: 700, Of: 1200, FirstS: 10.2}}}}}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := WriteHTML(path, s, ""); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Throttleable set", "<td>b2 (reader)</td><td>10.213.0.242</td><td>0</td><td>1200</td><td>never</td>",
		"<td>b3</td><td>10.213.0.243</td><td>700</td><td>1200</td><td>10.2</td>", "NFS export nfs://10.213.0.253/x"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
