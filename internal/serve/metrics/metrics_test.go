package metrics

import (
	"errors"
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/serve/status"
)

var update = flag.Bool("update", false, "rewrite testdata/metrics.golden")

func fixture() status.Status {
	return status.Status{
		Version: "v0.1.0", Backend: "nfqueue", UptimeS: 3723.5,
		Resources: []status.Resource{
			{Name: "fs-lab", SignalMs: 27.5, RawMs: 31.25, ThresholdMs: 15, TargetMs: 13.8, DelayMs: 4.5, ControlMs: 4.5, UMaxMs: 30, RelapseMs: 3, PendingMs: 250, Signal: "p99", Source: "ebpf", P95Ms: 30, P99Ms: 31.25, Members: []string{"10.99.0.3", "10.99.0.4"}},
			{Name: "vg-data", Conflict: "the promise wins", SignalMs: 3.25, ThresholdMs: 20, TargetMs: 17, ControlMs: 2, UMaxMs: 20, Saturated: true, RecallMs: 36.5, Signal: "mean", Source: "diskstats"},
		},
		Consumers: []status.Consumer{
			{Resource: "fs-lab", Device: "loop1", Addr: "10.99.0.2", ReadKBs: 256, RAwaitMs: 31.25},
			{Resource: "fs-lab", Device: "loop2", Addr: "10.99.0.3", WriteKBs: 18000, WriteEWMAKBs: 17500.5, Throttleable: true,
				OutstandingWrites: 3.4, DelayMs: 2.5, InForceMs: 2,
				Name: "db1", Terms: tenant.Terms{Name: "db1", Share: 4, ReserveBps: 20e6, CapBps: 50e6, ThresholdMs: 8}},
		},
		Throttle:  status.BackendStats{PacketsHeld: 1200, PacketsPassed: 1195, Backlog: 5, DelayErrorP50Ms: 0.04, DelayErrorMaxMs: 0.9, DelayErrorAvgMs: 0.05, Takeovers: 3, Bypassed: 7, Dropped: 3, Errors: 2},
		Discovery: status.Discovery{OK: true, Unresolved: []string{"/srv/sanqos/lun-a2.img"}},
	}
}

func sloFixture() SLO {
	return SLO{
		Resources: []SLOResource{
			{Name: "fs-lab", Reads: 52000, ReadSeconds: 780.5, Timed: 51900, TimedSeconds: 779.25,
				Buckets:              []uint64{10, 20, 30, 40, 50, 100, 30000, 15000, 5000, 1500, 100, 0, 0},
				OverThresholdSeconds: 120.5, ThrottledSeconds: 300, SaturatedSeconds: 4.5},
			{Name: "vg-data", Reads: 900, ReadSeconds: 2.7, Buckets: make([]uint64, len(ReadBuckets))},
		},
		Clients: []Client{
			{Addr: "10.99.0.2", Name: "iqn.2026-11.lab:a", SentBytes: 1 << 20, ReceivedBytes: 5 << 30},
			{Addr: "10.99.0.3", SentBytes: 40 << 30, ReceivedBytes: 1 << 10},
		},
		Manual: []Manual{
			{Addr: "10.99.0.4", Direction: "write", Delay: 5 * time.Millisecond},
			{Addr: "10.99.0.5", ReadRate: 10 << 20},
		},
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestMetricsGolden(t *testing.T) {
	m := New(fixture)
	for _, d := range []time.Duration{80 * time.Microsecond, 200 * time.Microsecond, 3 * time.Millisecond} {
		m.ObserveTick(d)
	}
	m.Applied(nil)
	m.Applied(errors.New("boom"))
	m.StatsErrors(2)
	m.Discovered(errors.New("tgtadm failed"))
	m.Discovered(nil)
	m.KernelRepair("jump")
	m.KernelRepair("member")
	m.KernelRepair("member")
	m.SetSLO(sloFixture)
	m.ConfigLoaded(time.Unix(1795000000, 0))
	m.Reloaded(nil, time.Unix(1795000600, 500e6))
	m.Reloaded(errors.New("bad threshold"), time.Unix(1795000900, 0))
	got, runtime := sanqosOnly(scrape(t, m))
	for _, want := range []string{"go_goroutines ", "process_open_fds ", "process_resident_memory_bytes "} {
		if !strings.Contains(runtime, "\n"+want) {
			t.Errorf("/metrics lacks the process's own %q", want)
		}
	}
	p := filepath.Join("testdata", "metrics.golden")
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden file (go test -update creates it): %v", err)
	}
	if got != string(want) {
		t.Errorf("/metrics differs from %s (go test -update if intended)\n--- got\n%s", p, got)
	}
}

// A resource that leaves the topology must leave /metrics too.
func TestMetricsFollowSnapshot(t *testing.T) {
	s := fixture()
	m := New(func() status.Status { return s })
	if out := scrape(t, m); !strings.Contains(out, `sanqos_resource_throttle_delay_seconds{resource="fs-lab"} 0.0045`) {
		t.Fatalf("delay of fs-lab missing:\n%s", out)
	}
	s.Resources = s.Resources[1:]
	s.Consumers = nil
	out := scrape(t, m)
	if strings.Contains(out, `resource="fs-lab"`) {
		t.Errorf("fs-lab still exported after it left the snapshot:\n%s", out)
	}
	if !strings.Contains(out, `sanqos_resource_threshold_seconds{resource="vg-data"} 0.02`) {
		t.Errorf("vg-data missing:\n%s", out)
	}
}

func TestDiscoveryGauge(t *testing.T) {
	m := New(fixture)
	m.Discovered(errors.New("x"))
	out := scrape(t, m)
	if !strings.Contains(out, "sanqos_discovery_success 0\n") || !strings.Contains(out, "sanqos_discovery_errors_total 1\n") {
		t.Errorf("failed discovery not visible:\n%s", out)
	}
	m.Discovered(nil)
	out = scrape(t, m)
	if !strings.Contains(out, "sanqos_discovery_success 1\n") || !strings.Contains(out, "sanqos_discovery_errors_total 1\n") {
		t.Errorf("recovered discovery not visible:\n%s", out)
	}
}

// sanqosOnly splits a scrape into the sanqos metrics, which are
// deterministic, and the Go runtime's and process's (go_*, process_*),
// which are not.
func sanqosOnly(scrape string) (sanqos, runtime string) {
	var a, b strings.Builder
	for _, line := range strings.SplitAfter(scrape, "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimPrefix(line, "# HELP "), "# TYPE "))
		if len(f) > 0 && (strings.HasPrefix(f[0], "go_") || strings.HasPrefix(f[0], "process_")) {
			b.WriteString(line)
			continue
		}
		a.WriteString(line)
	}
	return a.String(), "\n" + b.String()
}

// The reload metrics follow Prometheus's own: a refused reload drops
// last_reload_successful and keeps the last good timestamp.
func TestReloadMetrics(t *testing.T) {
	start := time.Unix(1795000000, 0)
	tests := []struct {
		name     string
		reloads  []error
		want     []string
		wantNone []string
	}{{
		name: "at start: loaded, no reload yet",
		want: []string{
			"sanqos_config_last_reload_successful 1\n",
			"sanqos_config_last_reload_success_timestamp_seconds 1.795e+09\n",
			`sanqos_config_reloads_total{result="failure"} 0` + "\n",
			`sanqos_config_reloads_total{result="success"} 0` + "\n",
		},
	}, {
		name:    "a refused reload",
		reloads: []error{errors.New("x")},
		want: []string{
			"sanqos_config_last_reload_successful 0\n",
			"sanqos_config_last_reload_success_timestamp_seconds 1.795e+09\n",
			`sanqos_config_reloads_total{result="failure"} 1` + "\n",
		},
	}, {
		name:    "refused, then accepted",
		reloads: []error{errors.New("x"), nil},
		want: []string{
			"sanqos_config_last_reload_successful 1\n",
			"sanqos_config_last_reload_success_timestamp_seconds 1.79500012e+09\n",
			`sanqos_config_reloads_total{result="failure"} 1` + "\n",
			`sanqos_config_reloads_total{result="success"} 1` + "\n",
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := New(fixture)
			m.ConfigLoaded(start)
			for i, err := range tc.reloads {
				m.Reloaded(err, start.Add(time.Duration(i+1)*time.Minute))
			}
			out := scrape(t, m)
			for _, w := range tc.want {
				if !strings.Contains(out, "\n"+w) {
					t.Errorf("missing %q", w)
				}
			}
		})
	}
}

// Without SetSLO (a daemon that has not wired it) the totals are absent,
// not zero: a zero counter would claim reads that nobody counted.
func TestSLOAbsentWithoutSource(t *testing.T) {
	out := scrape(t, New(fixture))
	for _, name := range []string{"sanqos_resource_reads_total", "sanqos_resource_read_duration_seconds", "sanqos_client_sent_bytes_total"} {
		if strings.Contains(out, "\n"+name) {
			t.Errorf("%s exported without totals", name)
		}
	}
}

// TestMetricsConsumerBypass: the consumers that lost their delay to the
// backlog's limits are named with their counters; without any, no
// series.
func TestMetricsConsumerBypass(t *testing.T) {
	s := fixture()
	m := New(func() status.Status { return s })
	if got := scrape(t, m); strings.Contains(got, "consumer_bypassed") {
		t.Fatalf("bypass series without bypassers:\n%s", got)
	}
	s.Throttle.Bypassers = []status.ConsumerBypass{{Addr: "10.99.0.9", Held: 4096, Delayed: 41036, Bypassed: 28668}}
	got := scrape(t, m)
	for _, want := range []string{
		`sanqos_datapath_consumer_bypassed_packets_total{addr="10.99.0.9"} 28668`,
		`sanqos_datapath_consumer_delayed_packets_total{addr="10.99.0.9"} 41036`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
