package daemon

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/decide/tenant"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// loadStats makes counters as a disk would see them: loop1 serves a reader
// whose reads take readMs each, loop2 a writer at writeKBs.
type loadStats struct {
	r1, rt1, ws2 uint64
	readMs       uint64
	writeKBs     uint64
	dropLoop2    bool
}

func (s *loadStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) {
	s.r1 += 10
	s.rt1 += 10 * s.readMs
	s.ws2 += s.writeKBs * 2 / 10 // sectors per 100 ms tick
	st := []diskstats.Stat{
		{Major: 7, Minor: 1, Device: "loop1", Fields: 20, ReadIOs: s.r1, ReadTicks: s.rt1},
		{Major: 7, Minor: 2, Device: "loop2", Fields: 20, WriteSectors: s.ws2, WriteIOs: s.ws2 / 128},
	}
	if s.dropLoop2 {
		st = st[:1]
	}
	return st, nil, nil
}

// With the real engine: a slow reader and a heavy writer on one resource
// make the daemon throttle the writer; a fast reader releases it.
func TestRealEngineThrottlesWriter(t *testing.T) {
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"}, {Addr: writer, Device: "loop2"},
	}}}}
	e, err := engine.New(openLoopConfig(), topo)
	if err != nil {
		t.Fatal(err)
	}
	stats := &loadStats{readMs: 60, writeKBs: 20000}
	be := &fakeBackend{}
	logs := &logBuf{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: FromEngine(e, []uint16{3260}, nil), Stats: stats, Backend: be,
		Logger: newLogger(logs), Topology: topo})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	run := func(n int) {
		for range n {
			now = now.Add(100 * time.Millisecond)
			d.tick(context.Background(), now)
		}
	}
	run(50)
	s := d.Status()
	if len(s.Resources) != 1 || !s.Resources[0].Throttling() {
		t.Fatalf("after 5 s of 60 ms reads against a 20 MB/s writer, not throttling: %+v", s.Resources)
	}
	if m := s.Resources[0].Members; len(m) != 1 || m[0] != writer.String() {
		t.Errorf("members = %v, want only the writer %v", m, writer)
	}
	last := be.applied[len(be.applied)-1].Groups[0]
	if len(last.Members) != 1 || last.Members[0] != writer || last.WriteDelay <= 0 || last.Ports[0] != 3260 {
		t.Errorf("applied group = %+v", last)
	}
	if logs.count("throttling engaged", "resource=fs-lab") != 1 {
		t.Errorf("engagement not logged once:\n%s", logs)
	}

	if logs.count("missing from diskstats") != 0 {
		t.Errorf("missing devices reported while all are present:\n%s", logs)
	}

	stats.readMs = 1
	run(300)
	if s := d.Status(); s.Resources[0].Throttling() {
		t.Errorf("after 30 s of 1 ms reads still throttling: %+v", s.Resources[0])
	}
	if logs.count("throttling released", "resource=fs-lab") != 1 {
		t.Errorf("release not logged once:\n%s", logs)
	}
	if g := be.applied[len(be.applied)-1].Groups[0]; len(g.Members) != 0 || g.WriteDelay != 0 {
		t.Errorf("last applied group = %+v, want empty", g)
	}

	stats.dropLoop2 = true
	run(3)
	if s := d.Status(); s.Resources[0].MissingDevices != 1 {
		t.Errorf("missing devices = %d, want 1 (loop2 left diskstats)", s.Resources[0].MissingDevices)
	}
	if n := logs.count("missing from diskstats", "resource=fs-lab", "missing=1"); n != 1 {
		t.Errorf("missing device logged %d times over 3 ticks, want 1", n)
	}
}

// BenchmarkTickRealEngine is one whole tick with the production engine and
// the adapter: 100 resources of 10 consumers, each on its own device, with
// counters that move every tick; the snapshot is prebuilt (parsing is
// benchmarked in internal/decide/engine) and the backend is a fake.
func BenchmarkTickRealEngine(b *testing.B) {
	var topo topology.Topology
	var snap []diskstats.Stat
	for i := range 100 {
		r := topology.Resource{Name: "res" + strconv.Itoa(i)}
		for j := range 10 {
			dev := "loop" + strconv.Itoa(i*10+j)
			r.Consumers = append(r.Consumers, topology.Consumer{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i), byte(j)}), Device: dev})
			snap = append(snap, diskstats.Stat{Device: dev, Fields: 20})
		}
		topo.Resources = append(topo.Resources, r)
	}
	e, err := engine.New(openLoopConfig(), topo)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := New(Options{Clock: clock.NewFake(t0), Decider: FromEngine(e, nil, nil), Stats: &sliceStats{snap: snap},
		Backend: &fakeBackend{}, Logger: newLogger(&logBuf{}), Topology: topo})
	ctx := context.Background()
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for k := range snap {
			snap[k].ReadIOs += 10
			snap[k].ReadTicks += 300 // 30 ms reads: over the threshold
			snap[k].WriteSectors += 2000
		}
		now = now.Add(100 * time.Millisecond)
		d.tick(ctx, now)
	}
}

type sliceStats struct{ snap []diskstats.Stat }

func (s *sliceStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) { return s.snap, nil, nil }

// The adapter turns each engine throttle into a backend group on the
// target ports, with the delay on the directions asked for, and an empty
// group where nobody is held; returning writers are armed in the write
// direction only.
func TestThrottleStateDirections(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.3")
	ts := []engine.Throttle{
		{Name: "a", Members: []netip.Addr{ip}, Direction: direction.Both, Delay: 2500 * time.Microsecond},
		{Name: "b", Members: []netip.Addr{ip}, Direction: direction.Read, Delay: time.Millisecond},
		{Name: "c", Members: []netip.Addr{ip}, Direction: direction.Write, Delay: 3 * time.Millisecond},
		{Name: "d", Direction: direction.Write},
		{Name: "e", Direction: direction.Write, Armed: []netip.Addr{ip}, ArmedDelay: 4 * time.Millisecond},
		{Name: "f", Direction: direction.Read, Armed: []netip.Addr{ip}, ArmedDelay: 4 * time.Millisecond},
	}
	st := throttleState(ts, []uint16{3260, 860})
	want := []throttle.Group{
		{Name: "a", Members: []netip.Addr{ip}, WriteDelay: 2500 * time.Microsecond, ReadDelay: 2500 * time.Microsecond},
		{Name: "b", Members: []netip.Addr{ip}, ReadDelay: time.Millisecond},
		{Name: "c", Members: []netip.Addr{ip}, WriteDelay: 3 * time.Millisecond},
		{Name: "d"},
		{Name: "e", Armed: []netip.Addr{ip}, ArmedDelay: 4 * time.Millisecond},
		{Name: "f"},
	}
	if len(st.Groups) != len(want) {
		t.Fatalf("%d groups, want %d", len(st.Groups), len(want))
	}
	for i, g := range st.Groups {
		w := want[i]
		if g.Name != w.Name || len(g.Members) != len(w.Members) || g.WriteDelay != w.WriteDelay || g.ReadDelay != w.ReadDelay || len(g.Ports) != 2 ||
			!slices.Equal(g.Armed, w.Armed) || g.ArmedDelay != w.ArmedDelay {
			t.Errorf("group %d = %+v, want %+v with 2 ports", i, g, w)
		}
	}
}

// A consumer the engine holds at its own delay (tenants) gets a group of
// its own, named after its resource and address, beside the resource's.
func TestThrottleStateOwnDelays(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")
	ts := []engine.Throttle{{Name: "vg", Members: []netip.Addr{a}, Direction: direction.Write, Delay: 2 * time.Millisecond,
		Own: []engine.OwnDelay{{Addr: b, Delay: 7 * time.Millisecond}}}}
	st := throttleState(ts, []uint16{3260})
	if len(st.Groups) != 2 {
		t.Fatalf("groups %+v: want the resource's and one of its own", st.Groups)
	}
	g := st.Groups[1]
	if g.Name != "vg@10.0.0.4" || !slices.Equal(g.Members, []netip.Addr{b}) || g.WriteDelay != 7*time.Millisecond ||
		g.ReadDelay != 0 || len(g.Ports) != 1 {
		t.Errorf("own group %+v", g)
	}
	if !slices.Equal(st.Groups[0].Members, []netip.Addr{a}) {
		t.Errorf("resource group %+v: want only the consumer at the set's delay", st.Groups[0])
	}
}

// orderInFlight records the order of its samples and the engine's
// questions.
type orderInFlight struct{ calls []string }

func (o *orderInFlight) Sample(snap []diskstats.Stat) { o.calls = append(o.calls, "sample") }
func (o *orderInFlight) ReadsInFlight(string) (uint64, bool) {
	o.calls = append(o.calls, "read")
	return 1, true
}

// The reads in flight are sampled by the adapter before the engine's
// Step, as the probe is: the engine asks only the sample of its tick.
func TestAdapterSamplesInFlightBeforeStep(t *testing.T) {
	reader := netip.MustParseAddr("10.99.0.2")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"},
	}}}}
	inf := &orderInFlight{}
	cfg := engine.DefaultConfig()
	cfg.InFlight = inf
	e, err := engine.New(cfg, topo)
	if err != nil {
		t.Fatal(err)
	}
	a := FromEngine(e, nil, nil)
	snap := []diskstats.Stat{{Device: "loop1", Fields: 20, InProgress: 1}}
	now := t0
	var ticks [][]string
	for range 3 {
		inf.calls = nil
		now = now.Add(100 * time.Millisecond)
		a.Step(now, snap)
		ticks = append(ticks, inf.calls)
	}
	// The first Step only records counters; the next ones ask.
	for i, calls := range ticks[1:] {
		if len(calls) < 2 || calls[0] != "sample" || slices.Contains(calls[1:], "sample") {
			t.Errorf("tick %d: calls %v, want one sample, then the engine's questions", i+1, calls)
		}
	}
}

// openLoopConfig is the engine's default configuration for this
// package's tests, whose disks read at scripted latencies whatever the
// delay: the gain rule (step 6 of package control) would rightly find
// every delay futile and release it, so it is off.
func openLoopConfig() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.RulesOff = []string{"gain"}
	return cfg
}

// A consumer's tenant read cap becomes a rate group of its own beside the
// delay it is held at; on two resources it is capped once, at the lower.
func TestWithReadCaps(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.3")
	cons := []engine.ConsumerRates{
		{Resource: "r1", Addr: a, Terms: tenant.Terms{ReadCapBps: 8e6}},
		{Resource: "r2", Addr: a, Terms: tenant.Terms{ReadCapBps: 5e6}},
		{Resource: "r1", Addr: b, Terms: tenant.Terms{ReadCapBps: 1e6}},
		{Resource: "r1", Addr: netip.MustParseAddr("10.0.0.9")},
	}
	base := throttle.State{Groups: []throttle.Group{{Name: "r1", Members: []netip.Addr{a}, WriteDelay: 20 * time.Millisecond}}}
	got := withReadCaps(base, cons, []uint16{3260})
	want := []throttle.Group{
		base.Groups[0],
		{Name: ReadCapGroup(b), Members: []netip.Addr{b}, Ports: []uint16{3260}, ReadRate: 1_000_000},
		{Name: ReadCapGroup(a), Members: []netip.Addr{a}, Ports: []uint16{3260}, ReadRate: 5_000_000},
	}
	if !reflect.DeepEqual(got.Groups, want) {
		t.Errorf("groups\n got %+v\nwant %+v", got.Groups, want)
	}
	if s := withReadCaps(base, cons[3:], nil); len(s.Groups) != 1 {
		t.Errorf("no cap, no group: %+v", s.Groups)
	}
}
