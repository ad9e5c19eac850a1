package status

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixture is a status as a throttling daemon would serve it: one resource
// over its threshold with two members, one healthy resource.
func fixture() Status {
	start := time.Date(2026, 11, 21, 18, 0, 0, 0, time.UTC)
	return Status{
		Version: "v0.1.0", Backend: "nfqueue", StartedAt: start, UptimeS: 3723.4,
		TickMs: 100, Ticks: 37234, At: start.Add(3723 * time.Second), LastTickMs: 0.213,
		Resources: []Resource{
			{Name: "fs-lab", SignalMs: 27.5, RawMs: 31.25, ThresholdMs: 15, TargetMs: 12.75, DelayMs: 4.6, ControlMs: 4.6, InForceMs: 4.6, UMaxMs: 30, UMaxLimitMs: 200, PendingMs: 200, Signal: "p95", Source: "ebpf", MeanMs: 21.5, P95Ms: 31.25, P99Ms: 40, Reads: 31,
				Direction: "write", Members: []string{"10.99.0.3", "10.99.0.4"}},
			{Name: "vg-data", ThresholdBy: "db1", Conflict: "the reservation of backup (5MB/s) breaks the read promise; the promise wins", SignalMs: 3.2, RawMs: 0, ThresholdMs: 20, TargetMs: 17, ControlMs: 20, UMaxMs: 20, UMaxLimitMs: 20, Saturated: true, Signal: "p95", Source: "diskstats", Direction: "write"},
		},
		Consumers: []Consumer{
			{Resource: "fs-lab", Device: "loop1", Addr: "10.99.0.2", ReadKBs: 256, WriteKBs: 0, RAwaitMs: 31.25,
				Name: "db1", Terms: tenant.Terms{Name: "db1", ThresholdMs: 8}},
			{Resource: "fs-lab", Device: "loop2", Addr: "10.99.0.3", WriteKBs: 18000, WriteEWMAKBs: 17500.5, Throttleable: true,
				OutstandingWrites: 3.4, DelayMs: 4.6, InForceMs: 4.6, Name: "iqn.2026-01.lab:backup",
				Terms: tenant.Terms{Share: 2, ReserveBps: 5e6, CapBps: 50e6}},
			// An IPv4-only backend's view of an address it cannot hold would
			// differ the same way: the data path holds this one at nothing.
			{Resource: "fs-lab", Device: "loop3", Addr: "10.99.0.4", WriteKBs: 19500, WriteEWMAKBs: 19000, Throttleable: true,
				OutstandingWrites: 3.1, DelayMs: 4.6},
			{Resource: "vg-data", Device: "dm-0", Addr: "10.99.0.5", ReadKBs: 12, WriteKBs: 100, WriteEWMAKBs: 90, RAwaitMs: 3},
		},
		Throttle:  BackendStats{PacketsHeld: 1200, PacketsPassed: 1195, Backlog: 5, DelayErrorP50Ms: 0.04, DelayErrorMaxMs: 0.9},
		Discovery: Discovery{OK: true, LastSuccess: start.Add(3720 * time.Second), Errors: 1},
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from golden file (run with -update if intended)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestRenderTopGolden(t *testing.T) {
	golden(t, "top.golden", RenderTop(fixture(), TopOptions{Width: 100, Consumers: 3}))
}

func TestWriteTableGolden(t *testing.T) {
	var b strings.Builder
	if err := WriteTable(&b, fixture()); err != nil {
		t.Fatal(err)
	}
	golden(t, "status.golden", b.String())
}

func TestRenderTopListsWritersByRate(t *testing.T) {
	out := RenderTop(fixture(), TopOptions{Width: 100, Consumers: 2})
	if !strings.Contains(out, "members (2)") {
		t.Errorf("members count missing:\n%s", out)
	}
	// Both writers appear in the members line; look after the writers header.
	h := strings.Index(out, "TOP WRITERS")
	i3, i4 := strings.Index(out[h:], "10.99.0.3"), strings.Index(out[h:], "10.99.0.4")
	if i3 < 0 || i4 < 0 || i4 > i3 {
		t.Errorf("want 10.99.0.4 (19500 kB/s) listed before 10.99.0.3 (18000 kB/s):\n%s", out[h:])
	}
	if strings.Contains(out[h:], "10.99.0.2") || strings.Contains(out[h:], "10.99.0.5") {
		t.Errorf("only the top 2 writers should be listed:\n%s", out[h:])
	}
}

func TestRenderTopFailingDiscovery(t *testing.T) {
	s := fixture()
	s.Discovery = Discovery{OK: false, LastError: "tgtadm: exit status 22"}
	s.ApplyError = "ipset add: permission denied"
	out := RenderTop(s, TopOptions{})
	for _, want := range []string{"discovery FAILING: tgtadm: exit status 22", "last good never", "apply FAILING"} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
}

// LUNs discovery had to leave out are shown, by backing store, because
// their initiators go unprotected and unthrottled.
func TestRenderTopUnresolved(t *testing.T) {
	s := fixture()
	s.Discovery.Unresolved = []string{"/srv/a.img", "/srv/b.img"}
	out := RenderTop(s, TopOptions{})
	if want := "left out 2 LUN(s) whose device could not be resolved (see the log): /srv/a.img, /srv/b.img"; !strings.Contains(out, want) {
		t.Errorf("frame lacks %q:\n%s", want, out)
	}
	if strings.Contains(RenderTop(fixture(), TopOptions{}), "left out") {
		t.Error("a discovery with nothing left out still says so")
	}
}

func TestWriteTableMissingDevices(t *testing.T) {
	s := fixture()
	s.Resources[1].MissingDevices = 2
	var b strings.Builder
	WriteTable(&b, s)
	if !strings.Contains(b.String(), "note: 2 device(s) of vg-data missing") {
		t.Errorf("missing devices not shown:\n%s", b.String())
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		signal, threshold float64
		want              string
	}{
		{0, 10, "[     |    ]"},
		{5, 10, "[===  |    ]"},
		{10, 10, "[=====|    ]"},
		{20, 10, "[=====|####]"},
		{40, 10, "[===|######]"}, // scale grows with the signal
		{3, 0, "[==========]"},   // no threshold: no marker, full scale is the signal
		{0, 0, "[          ]"},
	}
	for _, tt := range tests {
		if got := bar(tt.signal, tt.threshold, 12); got != tt.want {
			t.Errorf("bar(%v, %v) = %q, want %q", tt.signal, tt.threshold, got, tt.want)
		}
	}
}

func TestClientGet(t *testing.T) {
	want := fixture()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(want)
	}))
	defer srv.Close()
	got, err := Client{Addr: strings.TrimPrefix(srv.URL, "http://")}.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Resources[0].Name != "fs-lab" || got.Resources[0].DelayMs != 4.6 || len(got.Consumers) != 4 || !got.At.Equal(want.At) {
		t.Errorf("round trip lost data: %+v", got)
	}
}

func TestClientNoDaemon(t *testing.T) {
	// A port that was just free: nothing listens there any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Client{Addr: addr}.Get(context.Background())
	if !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("err = %v, want ErrNoDaemon", err)
	}
	if !strings.Contains(err.Error(), "sanqos run") || !strings.Contains(err.Error(), addr) {
		t.Errorf("error should name the address and say how to start the daemon: %v", err)
	}
}

func TestClientNotADaemon(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>hello</html>"))
	}))
	defer srv.Close()
	_, err := Client{Addr: strings.TrimPrefix(srv.URL, "http://")}.Get(context.Background())
	if err == nil || errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), "decoding") {
		t.Fatalf("err = %v, want a decoding error", err)
	}
}

// A delay in force other than the one decided (a failed apply, a manual
// throttle of the same name) is said, with both values.
func TestWriteTableSaysDelayInForce(t *testing.T) {
	s := fixture()
	s.Resources[0].InForceMs = 200
	var b strings.Builder
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	if want := "fs-lab's data path holds its members at 200.00 ms, not the 4.60 ms decided"; !strings.Contains(b.String(), want) {
		t.Errorf("no %q in:\n%s", want, b.String())
	}
}

// TestFutileIsShown: a resource whose loop found its delay futile says
// so in the table (FUTILE, with the gain) and in top (∅ beside its
// delay); one that is not says nothing of it.
func TestFutileIsShown(t *testing.T) {
	for _, futile := range []bool{true, false} {
		s := fixture()
		s.Resources[0].Saturated, s.Resources[0].Futile, s.Resources[0].GainMsPerMs = false, futile, -0.002
		var b strings.Builder
		if err := WriteTable(&b, s); err != nil {
			t.Fatal(err)
		}
		top := RenderTop(s, TopOptions{Width: 100, Consumers: 3})
		if got := strings.Contains(b.String(), "FUTILE: delaying "+s.Resources[0].Name+"'s writers") && strings.Contains(b.String(), "-0.002 ms per ms"); got != futile {
			t.Errorf("futile %v: table says FUTILE with the gain %v:\n%s", futile, got, b.String())
		}
		if got := strings.Contains(top, "∅"); got != futile {
			t.Errorf("futile %v: top marks it %v:\n%s", futile, got, top)
		}
	}
}

// TestRelapseIsShown: a resource whose relapse guard holds says under
// what delay its delay falls slowly; one whose guard does not, nothing.
func TestRelapseIsShown(t *testing.T) {
	for _, ms := range []float64{10.7, 0} {
		s := fixture()
		s.Resources[0].RelapseMs = ms
		var b strings.Builder
		if err := WriteTable(&b, s); err != nil {
			t.Fatal(err)
		}
		want := "relapse: " + s.Resources[0].Name + "'s delay of 10.70 ms let the last overload in: while the guard holds (a minute, doubled each time the overload comes back, up to 4 minutes) the delay falls slowly under 16.05 ms"
		if got := strings.Contains(b.String(), want); got != (ms > 0) {
			t.Errorf("relapse %v ms: the table shows %q %v:\n%s", ms, want, got, b.String())
		}
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(js), `"relapse_ms":10.7`); got != (ms > 0) {
			t.Errorf("relapse %v ms: the JSON has relapse_ms %v: %s", ms, got, js)
		}
	}
}

// TestRecallIsShown: a resource at rest that remembers its last burst's
// delay says where an overload will start; one that is throttling, or
// remembers nothing, says nothing. The JSON carries it whenever known.
func TestRecallIsShown(t *testing.T) {
	for _, tc := range []struct {
		recall, control float64
		line            bool
	}{
		{36.5, 0, true},
		{36.5, 20, false},
		{0, 0, false},
	} {
		s := fixture()
		s.Resources[0].RecallMs, s.Resources[0].ControlMs = tc.recall, tc.control
		var b strings.Builder
		if err := WriteTable(&b, s); err != nil {
			t.Fatal(err)
		}
		want := "recall: an overload of " + s.Resources[0].Name + " from rest starts at 36.50 ms"
		if got := strings.Contains(b.String(), want); got != tc.line {
			t.Errorf("recall %v ms at a delay of %v: the table shows %q %v:\n%s", tc.recall, tc.control, want, got, b.String())
		}
		js, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(js), `"recall_ms":36.5`); got != (tc.recall > 0) {
			t.Errorf("recall %v ms: the JSON has recall_ms %v: %s", tc.recall, got, js)
		}
	}
}

// The reason auto chose the data path is shown under the header, and in
// the JSON; "as configured" is not worth a line.
func TestWriteTableBackendWhy(t *testing.T) {
	s := fixture()
	s.Backend, s.BackendWhy = "nfqueue", "auto: nfqueue, not edt: the kernel lacks fq"
	var b strings.Builder
	if err := WriteTable(&b, s); err != nil {
		t.Fatal(err)
	}
	if want := "backend nfqueue: auto: nfqueue, not edt: the kernel lacks fq\n"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"backend_why":"auto: nfqueue, not edt: the kernel lacks fq"`) {
		t.Errorf("JSON lacks backend_why: %s", js)
	}
	s.BackendWhy = "as configured"
	b.Reset()
	WriteTable(&b, s)
	if strings.Contains(b.String(), "as configured") {
		t.Errorf("a configured backend gets a reason line:\n%s", b.String())
	}
}
