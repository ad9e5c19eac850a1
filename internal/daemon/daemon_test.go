package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/status"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// dec is a one-resource decision as the engine would make it: members are
// in the throttle group only while the delay is above 0.
func dec(signal, delay float64, members ...string) Decision {
	r := status.Resource{Name: "fs-lab", SignalMs: signal, RawMs: signal, ThresholdMs: 15, DelayMs: delay,
		Reads: 10, Direction: "write", Members: members}
	g := throttle.Group{Name: "fs-lab", Ports: []uint16{3260}}
	if delay > 0 {
		for _, m := range members {
			g.Members = append(g.Members, netip.MustParseAddr(m))
		}
		g.WriteDelay = time.Duration(delay * float64(time.Millisecond))
	}
	return Decision{
		Resources: []status.Resource{r},
		Consumers: []status.Consumer{{Resource: "fs-lab", Device: "loop2", Addr: "10.99.0.3", WriteKBs: 9000, WriteEWMAKBs: 8000, Throttleable: len(members) > 0}},
		State:     throttle.State{Groups: []throttle.Group{g}},
	}
}

type rig struct {
	d     *Daemon
	eng   *fakeEngine
	stats *fakeStats
	be    *fakeBackend
	logs  *logBuf
	clk   *clock.Fake
	now   time.Time
}

func newRig(t *testing.T, decisions ...Decision) *rig {
	t.Helper()
	r := &rig{eng: &fakeEngine{decisions: decisions}, stats: &fakeStats{fail: map[int]bool{}},
		be: &fakeBackend{}, logs: &logBuf{}, clk: clock.NewFake(t0), now: t0}
	d, err := New(Options{Clock: r.clk, Decider: r.eng, Stats: r.stats, Backend: r.be, Logger: newLogger(r.logs), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	return r
}

// ticks runs n control steps directly, 100 ms apart.
func (r *rig) ticks(n int) {
	for range n {
		r.now = r.now.Add(100 * time.Millisecond)
		r.d.tick(context.Background(), r.now)
	}
}

func TestEngagedReleasedAndMembershipLogged(t *testing.T) {
	r := newRig(t,
		dec(5, 0),                            // healthy
		dec(20, 2, "10.99.0.3", "10.99.0.4"), // over threshold: engaged
		dec(22, 3, "10.99.0.3", "10.99.0.5"), // set changes
		dec(22, 3, "10.99.0.3", "10.99.0.5"),
		dec(10, 0), // released
		dec(10, 0),
	)
	r.ticks(6)
	if n := r.logs.count("throttling engaged", "resource=fs-lab", "signal_ms=20", "threshold_ms=15", "delay_ms=2"); n != 1 {
		t.Errorf("engaged logged %d times, want 1:\n%s", n, r.logs)
	}
	if n := r.logs.count("throttleable set changed", "added=[10.99.0.5]", "removed=[10.99.0.4]"); n != 1 {
		t.Errorf("membership change logged %d times, want 1:\n%s", n, r.logs)
	}
	if n := r.logs.count("throttling released", "resource=fs-lab", "signal_ms=10", "threshold_ms=15"); n != 1 {
		t.Errorf("released logged %d times, want 1:\n%s", n, r.logs)
	}
	if n := r.logs.count("throttling engaged"); n != 1 {
		t.Errorf("engaged logged %d times in all, want 1", n)
	}
}

func TestApplyOnlyOnChange(t *testing.T) {
	r := newRig(t, dec(5, 0), dec(5, 0), dec(5, 0),
		dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"),
		dec(21, 2.5, "10.99.0.3"), dec(21, 2.5, "10.99.0.3"))
	r.ticks(8)
	calls, _, _ := r.be.counts()
	// Tick 1 (nothing known about the kernel yet), tick 4 (engaged), tick 7
	// (delay changed).
	if calls != 3 {
		t.Fatalf("Apply called %d times over 8 ticks with 3 distinct states, want 3", calls)
	}
	last := r.be.applied[2].Groups[0]
	if last.WriteDelay != 2500*time.Microsecond || len(last.Members) != 1 {
		t.Errorf("last applied group = %+v", last)
	}
}

// The engine may reuse its slices; what the daemon compares against must be
// its own copy.
func TestAppliedStateIsCopied(t *testing.T) {
	d1 := dec(20, 2, "10.99.0.3")
	r := newRig(t, d1)
	r.ticks(1)
	d1.State.Groups[0].Members[0] = netip.MustParseAddr("10.99.0.9")
	r.ticks(1)
	if calls, _, _ := r.be.counts(); calls != 2 {
		t.Fatalf("a state mutated in place was not re-applied (calls=%d)", calls)
	}
}

func TestApplyRetriedAfterFailure(t *testing.T) {
	r := newRig(t, dec(20, 2, "10.99.0.3"))
	r.be.failN = 3
	r.ticks(2)
	if s := r.d.Status(); !strings.Contains(s.ApplyError, "operation not permitted") {
		t.Errorf("status does not show the failing apply: %q", s.ApplyError)
	}
	r.ticks(8)
	calls, ok, _ := r.be.counts()
	// 3 failures, 1 success, then no more calls: the state did not change.
	if calls != 4 || ok != 1 {
		t.Errorf("Apply calls = %d (successful %d), want 4 (1)", calls, ok)
	}
	if n := r.logs.count("applying the throttle state failed"); n != 1 {
		t.Errorf("failure logged %d times for one streak, want 1:\n%s", n, r.logs)
	}
	if n := r.logs.count("applied again after failures"); n != 1 {
		t.Errorf("recovery logged %d times, want 1", n)
	}
	if s := r.d.Status(); s.ApplyError != "" {
		t.Errorf("apply error still shown after recovery: %q", s.ApplyError)
	}
}

func TestStatsFailureHoldsThenReleases(t *testing.T) {
	r := newRig(t, dec(20, 2, "10.99.0.3"))
	for i := 2; i < 30; i++ {
		r.stats.fail[i] = true
	}
	r.ticks(2 + 9) // engaged, then 9 failed reads: still held
	if calls, _, _ := r.be.counts(); calls != 1 {
		t.Fatalf("Apply calls = %d before the release threshold, want 1", calls)
	}
	r.ticks(1) // 10th failed read: release
	r.ticks(5) // and stay released without re-applying
	calls, _, _ := r.be.counts()
	if calls != 2 {
		t.Fatalf("Apply calls = %d, want 2 (engage, release)", calls)
	}
	rel := r.be.applied[1]
	if len(rel.Groups) != 1 || len(rel.Groups[0].Members) != 0 || rel.Groups[0].WriteDelay != 0 {
		t.Errorf("release state = %+v, want the group with no members and no delay", rel)
	}
	if n := r.logs.count("reading diskstats failed"); n != 1 {
		t.Errorf("diskstats failure logged %d times, want 1", n)
	}
	if !strings.Contains(r.d.Status().StatsError, "no such file") {
		t.Errorf("status lacks the diskstats error")
	}
}

func TestRecordLines(t *testing.T) {
	var rec bytes.Buffer
	eng := &fakeEngine{decisions: []Decision{dec(5, 0), dec(20, 2, "10.99.0.3", "10.99.0.4")}}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: eng, Stats: &fakeStats{}, Backend: &fakeBackend{},
		Logger: newLogger(&logBuf{}), Recorder: &rec})
	if err != nil {
		t.Fatal(err)
	}
	d.tick(context.Background(), t0.Add(100*time.Millisecond))
	d.tick(context.Background(), t0.Add(200*time.Millisecond))
	sc := bufio.NewScanner(&rec)
	var lines []status.Record
	for sc.Scan() {
		var l status.Record
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 2 {
		t.Fatalf("got %d record lines, want 2", len(lines))
	}
	l := lines[1]
	if !l.T.Equal(t0.Add(200*time.Millisecond)) || l.TS != float64(t0.Add(200*time.Millisecond).UnixNano())/1e9 {
		t.Errorf("time = %v / %v", l.T, l.TS)
	}
	if len(l.Resources) != 1 || l.Resources[0].DelayMs != 2 || l.Resources[0].Members != 2 || l.Resources[0].SignalMs != 20 {
		t.Errorf("resource = %+v", l.Resources)
	}
	if len(l.Consumers) != 1 || l.Consumers[0].WriteKBs != 9000 {
		t.Errorf("consumers = %+v", l.Consumers)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) { f.n++; return 0, io.ErrShortWrite }

func TestRecordFailureDoesNotStopControl(t *testing.T) {
	fw := &failWriter{}
	logs := &logBuf{}
	be := &fakeBackend{}
	d, _ := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{decisions: []Decision{dec(5, 0), dec(20, 2, "10.99.0.3")}},
		Stats: &fakeStats{}, Backend: be, Logger: newLogger(logs), Recorder: fw})
	for i := range 5 {
		d.tick(context.Background(), t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	if fw.n != 1 || logs.count("writing the record failed") != 1 {
		t.Errorf("writes = %d, logs:\n%s", fw.n, logs)
	}
	if calls, _, _ := be.counts(); calls != 2 {
		t.Errorf("control stopped with the recorder: Apply calls = %d, want 2", calls)
	}
}

func topo(names ...string) topology.Topology {
	var t topology.Topology
	for i, n := range names {
		t.Resources = append(t.Resources, topology.Resource{Name: n, Consumers: []topology.Consumer{
			{Addr: netip.AddrFrom4([4]byte{10, 99, 0, byte(i + 2)}), Device: "loop" + string(rune('1'+i))}}})
	}
	return t
}

func TestRunDiscoveryFailureKeepsLastTopology(t *testing.T) {
	a, b := topo("fs-lab"), topo("fs-lab", "vg-data")
	disc := &fakeDiscoverer{results: []discResult{
		{topo: a, unresolved: []string{"/srv/x.img"}}, // at start, one LUN left out
		{err: io.ErrUnexpectedEOF},                    // failing…
		{err: io.ErrUnexpectedEOF},                    // …twice
		{topo: b},                                     // recovered, with a new resource
	}}
	logs := &logBuf{}
	eng := &fakeEngine{decisions: []Decision{dec(5, 0)}}
	be := &fakeBackend{}
	clk := clock.NewFake(t0)
	d, err := New(Options{Clock: clk, Tick: 100 * time.Millisecond, DiscoveryInterval: time.Second,
		Decider: eng, Stats: &fakeStats{}, Backend: be, Discoverer: disc, Logger: newLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	step := func() { clk.Advance(100 * time.Millisecond) }
	eventually(t, "a failed discovery", step, func() bool { return d.Status().Discovery.Errors > 0 })
	// A failed discovery says nothing new about LUNs: the last good list stays.
	if got := d.Status().Discovery.Unresolved; len(got) != 1 || got[0] != "/srv/x.img" {
		t.Errorf("during the failure Unresolved = %q, want the last good discovery's [/srv/x.img]", got)
	}
	if got := eng.topologies(); len(got) != 1 || len(got[0].Resources) != 1 {
		t.Fatalf("during the failure the engine has topologies %v, want only the first", got)
	}
	eventually(t, "the new topology to reach the engine", step, func() bool { return len(eng.topologies()) == 2 })
	// Further discoveries return the same topology: no more swaps. Wait
	// for three of them (the fake clock may be advanced while the loop is
	// busy, so count discoveries rather than steps).
	after := disc.callCount()
	eventually(t, "three more discoveries", step, func() bool { return disc.callCount() >= after+3 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := eng.topologies()
	if len(got) != 2 || len(got[1].Resources) != 2 {
		t.Errorf("engine topologies = %v, want [A B]", got)
	}
	if n := logs.count("discovery failed"); n != 1 {
		t.Errorf("discovery failure logged %d times for one streak, want 1:\n%s", n, logs)
	}
	if n := logs.count("discovery recovered"); n != 1 {
		t.Errorf("recovery logged %d times, want 1", n)
	}
	if n := logs.count("topology changed", "resources_added=[vg-data]", "consumers_added=[10.99.0.3/loop2@vg-data]"); n != 1 {
		t.Errorf("topology change logged %d times, want 1:\n%s", n, logs)
	}
	if s := d.Status(); !s.Discovery.OK || s.Discovery.Errors != 2 || len(s.Discovery.Unresolved) != 0 {
		t.Errorf("discovery status = %+v, want ok after 2 errors, nothing left out", s.Discovery)
	}
	if _, _, closed := be.counts(); closed != 1 {
		t.Errorf("backend closed %d times, want 1", closed)
	}
}

func TestRunDiscoveryFailingAtStart(t *testing.T) {
	disc := &fakeDiscoverer{results: []discResult{{err: io.ErrUnexpectedEOF}, {err: io.ErrUnexpectedEOF}, {topo: topo("fs-lab")}}}
	logs := &logBuf{}
	eng := &fakeEngine{decisions: []Decision{dec(5, 0)}}
	clk := clock.NewFake(t0)
	d, _ := New(Options{Clock: clk, DiscoveryInterval: time.Second, Decider: eng, Stats: &fakeStats{},
		Backend: &fakeBackend{}, Discoverer: disc, Logger: newLogger(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "the topology after two failures", func() { clk.Advance(100 * time.Millisecond) },
		func() bool { return len(eng.topologies()) == 1 })
	cancel()
	<-done
	if n := logs.count("discovery failed"); n != 1 {
		t.Errorf("failure at start logged %d times for one streak, want 1:\n%s", n, logs)
	}
	if n := logs.count("discovery recovered"); n != 1 {
		t.Errorf("recovery logged %d times, want 1", n)
	}
}

func TestRunShutdownClosesBackend(t *testing.T) {
	be := &fakeBackend{}
	clk := clock.NewFake(t0)
	logs := &logBuf{}
	d, _ := New(Options{Clock: clk, Decider: &fakeEngine{decisions: []Decision{dec(20, 2, "10.99.0.3")}},
		Stats: &fakeStats{}, Backend: be, Logger: newLogger(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "throttling to be applied", func() { clk.Advance(100 * time.Millisecond) },
		func() bool { _, ok, _ := be.counts(); return ok == 1 })
	if _, _, closed := be.counts(); closed != 0 {
		t.Fatal("backend closed while running")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on a clean shutdown", err)
	}
	if _, _, closed := be.counts(); closed != 1 {
		t.Errorf("backend closed %d times on shutdown, want 1", closed)
	}
	if logs.count("throttle state removed") != 1 {
		t.Errorf("shutdown not logged:\n%s", logs)
	}
}

func TestHTTPStatusAndMetrics(t *testing.T) {
	r := newRig(t, dec(20, 2, "10.99.0.3"))
	r.ticks(3)
	h := r.d.Handler()

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var s status.Status
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
		t.Fatalf("/status is not JSON: %v\n%s", err, rec.Body)
	}
	if s.Ticks != 3 || s.Backend != "fake" || s.Version != "test" || len(s.Resources) != 1 ||
		s.Resources[0].DelayMs != 2 || s.Throttle.PacketsHeld != 7 || s.TickMs != 100 {
		t.Errorf("/status = %+v", s)
	}
	if s.UptimeS != 0 { // the fake clock has not moved: uptime comes from it
		t.Errorf("uptime = %v, want 0 on the fake clock", s.UptimeS)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`sanqos_resource_throttle_delay_seconds{resource="fs-lab"} 0.002`,
		`sanqos_resource_throttle_members{resource="fs-lab"} 1`,
		"sanqos_ticks_total 3",
		"sanqos_throttle_applies_total 1",
		"sanqos_tick_duration_seconds_count 3",
		"sanqos_datapath_packets_held_total 7",
		`sanqos_build_info{backend="fake",version="test"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestNewRejectsMissingParts(t *testing.T) {
	good := Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{}, Stats: &fakeStats{}, Backend: &fakeBackend{}}
	for name, mut := range map[string]func(*Options){
		"clock":   func(o *Options) { o.Clock = nil },
		"engine":  func(o *Options) { o.Decider = nil },
		"stats":   func(o *Options) { o.Stats = nil },
		"backend": func(o *Options) { o.Backend = nil },
		"tick":    func(o *Options) { o.Tick = -time.Second },
	} {
		o := good
		mut(&o)
		if _, err := New(o); err == nil {
			t.Errorf("New without %s succeeded", name)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("New(good): %v", err)
	}
}

// BenchmarkTick measures the daemon's own cost per tick (engine and
// backend are fakes returning at once): 100 resources of 10 consumers,
// steady state so Apply is skipped, as in a long throttled run.
func BenchmarkTick(b *testing.B) {
	var d0 Decision
	for i := range 100 {
		name := "res" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		g := throttle.Group{Name: name, Ports: []uint16{3260}, WriteDelay: 2 * time.Millisecond}
		r := status.Resource{Name: name, SignalMs: 20, ThresholdMs: 15, DelayMs: 2, Direction: "write"}
		for j := range 10 {
			a := netip.AddrFrom4([4]byte{10, 1, byte(i), byte(j)})
			g.Members = append(g.Members, a)
			r.Members = append(r.Members, a.String())
			d0.Consumers = append(d0.Consumers, status.Consumer{Resource: name, Addr: a.String(), Device: "loop", WriteKBs: 1000})
		}
		d0.Resources = append(d0.Resources, r)
		d0.State.Groups = append(d0.State.Groups, g)
	}
	d, _ := New(Options{Clock: clock.NewFake(t0), Decider: &fakeEngine{decisions: []Decision{d0}}, Stats: &fakeStats{},
		Backend: &fakeBackend{}, Logger: newLogger(&logBuf{})})
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(100 * time.Millisecond)
		d.tick(ctx, now)
	}
}

// A delay stuck at its limit while the latency stays over the threshold
// (the engine's Saturated) is said once, after it has lasted, not at
// every burst start.
func TestSaturationWarnedOnce(t *testing.T) {
	atMax := dec(19, 20, "10.99.0.3")
	atMax.Resources[0].UMaxMs, atMax.Resources[0].UMaxLimitMs, atMax.Resources[0].Saturated = 20, 20, true
	brief := make([]Decision, 0, 400)
	for range 50 { // 5 s at the rail: a burst start, not worth a word
		brief = append(brief, atMax)
	}
	brief = append(brief, dec(12, 8, "10.99.0.3"))
	for range 300 { // 30 s at the rail
		brief = append(brief, atMax)
	}
	r := newRig(t, brief...)
	r.ticks(51)
	if n := r.logs.count("raise it"); n != 0 {
		t.Fatalf("warned after 5 s at u_max:\n%s", r.logs)
	}
	r.ticks(300)
	if n := r.logs.count("pid.u_max_limit allows; raise it", "resource=fs-lab", "u_max_limit_ms=20", "threshold_ms=15"); n != 1 {
		t.Errorf("saturation warned %d times over 30 s at u_max, want once:\n%s", n, r.logs)
	}
}

// A backend that leaves part of a state out (an IPv6 consumer on a tc
// backend) has applied the rest: the state counts as in force (no retry
// every tick), and what was left out is said once, not as a failure.
func TestRefusedPartIsWarnedOnceAndTheRestApplied(t *testing.T) {
	r := newRig(t, dec(30, 5, "10.99.0.3"))
	r.be.refuse = "consumer 2001:db8::3: the htb backend controls IPv4 only"
	r.ticks(20)
	calls, _, _ := r.be.counts()
	if calls != 1 {
		t.Errorf("%d applies of an unchanged state, want 1: a refused part must not make it retry every tick", calls)
	}
	if n := r.logs.count("left part of the throttle state out", "2001:db8::3"); n != 1 {
		t.Errorf("refusal said %d times, want once:\n%s", n, r.logs)
	}
	if n := r.logs.count("applying the throttle state failed"); n != 0 {
		t.Errorf("a refusal was logged as a failure:\n%s", r.logs)
	}
}

// renewingBackend is a backend whose state lapses unless renewed (edt).
type renewingBackend struct {
	fakeBackend
	renewals int
	fail     bool
}

func (b *renewingBackend) Renew(context.Context) error {
	b.renewals++
	if b.fail {
		return errors.New("map gone")
	}
	return nil
}

// TestRenewedEveryTick: a Renewer backend is renewed at every tick, also
// when the state did not change (Apply is then skipped), and a failing
// renewal is logged once when it starts.
func TestRenewedEveryTick(t *testing.T) {
	r := newRig(t, dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"), dec(20, 2, "10.99.0.3"))
	be := &renewingBackend{}
	r.d.o.Backend = be
	r.ticks(3)
	if calls, _, _ := be.counts(); calls != 1 || be.renewals != 3 {
		t.Fatalf("over 3 ticks of one state: %d applies, %d renewals; want 1 and 3", calls, be.renewals)
	}
	be.fail = true
	r.ticks(2)
	if n := r.logs.count("renewing the throttles failed"); n != 1 {
		t.Errorf("failed renewal logged %d times over 2 ticks, want 1:\n%s", n, r.logs)
	}
}
