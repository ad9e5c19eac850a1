package daemon

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/metrics"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// sloTick is one scripted tick of the SLO rig: the diskstats, the
// resource as the step decided it, and what the probe and the wire read.
type sloTick struct {
	disk  []diskstats.Stat
	res   status.Resource
	probe map[string][]time.Duration // device → the reads it timed
	wire  map[netip.Addr]attribution.Counters
}

// sloDecider is a Decider that also answers the probe and the wire as
// FromEngine's does.
type sloDecider struct {
	ticks []sloTick
	i     int
	cur   sloTick
}

func (e *sloDecider) SetTopology(topology.Topology) {}
func (e *sloDecider) Step(time.Time, []diskstats.Stat) Decision {
	e.cur = e.ticks[e.i]
	e.i++
	d := Decision{Resources: []status.Resource{e.cur.res}}
	if r := e.cur.res; r.InForceMs > 0 {
		// The delay is in force once applied (the loop sets InForceMs
		// from what the backend took).
		d.State.Groups = []throttle.Group{{Name: r.Name, Members: []netip.Addr{sloB}, WriteDelay: time.Duration(r.InForceMs * float64(time.Millisecond))}}
	}
	return d
}

func (e *sloDecider) probeTick(dev string) (latency.Ops, bool) {
	ds, ok := e.cur.probe[dev]
	if !ok {
		return latency.Ops{}, false
	}
	var o latency.Ops
	for _, d := range ds {
		o.Count++
		o.Sum += d
		o.Hist.Add(d)
	}
	return o, true
}

func (e *sloDecider) wireCounters() map[netip.Addr]attribution.Counters { return e.cur.wire }

// sloStats hands the decider's next tick's diskstats to the loop.
type sloStats struct{ e *sloDecider }

func (s sloStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) {
	return s.e.ticks[s.e.i].disk, nil, nil
}

var (
	sloA = netip.MustParseAddr("10.99.0.2")
	sloB = netip.MustParseAddr("10.99.0.3")
)

func sloTopology() topology.Topology {
	return topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
		{Addr: sloA, Device: "loop1", IQNs: []string{"iqn.2026-11.lab:a"}},
		{Addr: sloB, Device: "loop2"},
		{Addr: sloB, Device: "loop1"}, // a device twice counts once
	}}}}
}

func disk(dev string, reads, ms uint64) diskstats.Stat {
	return diskstats.Stat{Device: dev, Fields: 20, ReadIOs: reads, ReadTicks: ms}
}

func runSLO(t *testing.T, ticks []sloTick, manual []throttle.Group) metrics.SLO {
	t.Helper()
	e := &sloDecider{ticks: ticks}
	var ov Overrides
	if manual != nil {
		ov = fixedOverrides(manual)
	}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: e, Stats: sloStats{e}, Backend: &fakeBackend{},
		Topology: sloTopology(), Logger: newLogger(&logBuf{}), Overrides: ov})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for range ticks {
		now = now.Add(100 * time.Millisecond)
		d.tick(context.Background(), now)
	}
	return d.slo.snapshot()
}

type fixedOverrides []throttle.Group

func (o fixedOverrides) Groups() []throttle.Group { return o }

func TestSLOTotals(t *testing.T) {
	healthy := status.Resource{Name: "fs-lab", SignalMs: 5, ThresholdMs: 15, Source: "diskstats"}
	over := status.Resource{Name: "fs-lab", SignalMs: 20, ThresholdMs: 15, Source: "diskstats"}
	saturated := status.Resource{Name: "fs-lab", SignalMs: 40, ThresholdMs: 15, Saturated: true, Source: "diskstats"}
	ms := time.Millisecond
	tests := []struct {
		name  string
		ticks []sloTick
		want  metrics.SLOResource
	}{{
		name: "the first tick only learns the counters since boot",
		ticks: []sloTick{
			{disk: []diskstats.Stat{disk("loop1", 1000, 5000), disk("loop2", 10, 10)}, res: healthy},
		},
		want: metrics.SLOResource{},
	}, {
		name: "reads and read time add up over the resource's devices, not others",
		ticks: []sloTick{
			{disk: []diskstats.Stat{disk("loop1", 1000, 5000), disk("loop2", 10, 10), disk("sda", 0, 0)}, res: healthy},
			{disk: []diskstats.Stat{disk("loop1", 1010, 5050), disk("loop2", 15, 30), disk("sda", 99, 99)}, res: healthy},
			{disk: []diskstats.Stat{disk("loop1", 1020, 5100), disk("loop2", 15, 30), disk("sda", 199, 199)}, res: healthy},
		},
		want: metrics.SLOResource{Reads: 25, ReadSeconds: 0.12},
	}, {
		name: "a device whose counters went back counts from zero",
		ticks: []sloTick{
			{disk: []diskstats.Stat{disk("loop1", 1000, 5000)}, res: healthy},
			{disk: []diskstats.Stat{disk("loop1", 4, 8)}, res: healthy},
		},
		want: metrics.SLOResource{Reads: 4, ReadSeconds: 0.008},
	}, {
		name: "seconds over the threshold, throttled and saturated, one tick each",
		ticks: []sloTick{
			{res: healthy},
			{res: over},
			{res: func() status.Resource { r := over; r.InForceMs = 3; return r }()},
			{res: func() status.Resource { r := saturated; r.InForceMs = 30; return r }()},
		},
		want: metrics.SLOResource{OverThresholdSeconds: 0.3, ThrottledSeconds: 0.2, SaturatedSeconds: 0.1},
	}, {
		name: "probe reads go into the histogram, never in a faster bucket than they took",
		ticks: []sloTick{{
			res: status.Resource{Name: "fs-lab", SignalMs: 5, ThresholdMs: 15, Source: "ebpf"},
			probe: map[string][]time.Duration{
				"loop1": {90 * time.Microsecond, 99 * time.Microsecond, 3 * ms},
				// 14.9 ms shares a probe bucket with 15.3 ms: it counts under 20 ms.
				"loop2": {14900 * time.Microsecond, 19 * ms, 300 * ms},
			},
		}},
		want: metrics.SLOResource{Timed: 6, TimedSeconds: (90e-6 + 99e-6 + 3e-3 + 14.9e-3 + 19e-3 + 0.3),
			Buckets: []uint64{2, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0}},
	}, {
		name: "probe reads of a tick the engine measured from diskstats are left out",
		ticks: []sloTick{{
			res:   healthy,
			probe: map[string][]time.Duration{"loop1": {3 * ms}},
		}},
		want: metrics.SLOResource{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := runSLO(t, tc.ticks, nil)
			if len(got.Resources) != 1 {
				t.Fatalf("resources: %+v", got.Resources)
			}
			r := got.Resources[0]
			tc.want.Name = "fs-lab"
			if tc.want.Buckets == nil {
				tc.want.Buckets = make([]uint64, len(metrics.ReadBuckets))
			}
			if r.Reads != tc.want.Reads || !near(r.ReadSeconds, tc.want.ReadSeconds) || r.Timed != tc.want.Timed ||
				!near(r.TimedSeconds, tc.want.TimedSeconds) || !slices.Equal(r.Buckets, tc.want.Buckets) ||
				!near(r.OverThresholdSeconds, tc.want.OverThresholdSeconds) || !near(r.ThrottledSeconds, tc.want.ThrottledSeconds) ||
				!near(r.SaturatedSeconds, tc.want.SaturatedSeconds) {
				t.Errorf("got  %+v\nwant %+v", r, tc.want)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestSLOClientBytes(t *testing.T) {
	other := netip.MustParseAddr("10.99.0.9")
	c := func(sent, recv uint64) attribution.Counters { return attribution.Counters{Sent: sent, Received: recv} }
	res := status.Resource{Name: "fs-lab"}
	got := runSLO(t, []sloTick{
		// First sight: the set entries are this daemon's, all counts.
		{res: res, wire: map[netip.Addr]attribution.Counters{sloA: c(100, 1000), other: c(5, 5)}},
		{res: res, wire: map[netip.Addr]attribution.Counters{sloA: c(150, 1500), sloB: c(7, 0)}},
		// A read that failed: nothing to add.
		{res: res},
		// sloB's entry was re-created: it counts from zero again.
		{res: res, wire: map[netip.Addr]attribution.Counters{sloA: c(200, 1500), sloB: c(3, 40)}},
	}, nil)
	slices.SortFunc(got.Clients, func(a, b metrics.Client) int { return compareStr(a.Addr, b.Addr) })
	want := []metrics.Client{
		{Addr: "10.99.0.2", Name: "iqn.2026-11.lab:a", SentBytes: 200, ReceivedBytes: 1500},
		{Addr: "10.99.0.3", SentBytes: 10, ReceivedBytes: 40},
	}
	if !slices.Equal(got.Clients, want) {
		t.Errorf("clients:\ngot  %+v\nwant %+v", got.Clients, want)
	}
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestSLOManualThrottles(t *testing.T) {
	got := runSLO(t, []sloTick{{res: status.Resource{Name: "fs-lab"}}}, []throttle.Group{
		{Name: "manual-10.99.0.2", Members: []netip.Addr{sloA}, WriteDelay: 5 * time.Millisecond},
		{Name: "manual-10.99.0.3", Members: []netip.Addr{sloB}, WriteDelay: 2 * time.Millisecond, ReadDelay: 2 * time.Millisecond},
		{Name: "manual-10.99.0.9", Members: []netip.Addr{netip.MustParseAddr("10.99.0.9")}, ReadRate: 10 << 20},
	})
	want := []metrics.Manual{
		{Addr: "10.99.0.2", Direction: "write", Delay: 5 * time.Millisecond},
		{Addr: "10.99.0.3", Direction: "both", Delay: 2 * time.Millisecond},
		{Addr: "10.99.0.9", ReadRate: 10 << 20},
	}
	if !slices.Equal(got.Manual, want) {
		t.Errorf("manual:\ngot  %+v\nwant %+v", got.Manual, want)
	}
}

// A resource that leaves the topology leaves the totals.
func TestSLOFollowsTopology(t *testing.T) {
	s := newSLOTotals()
	s.setTopology(sloTopology())
	s.observe(100*time.Millisecond, nil, []status.Resource{{Name: "fs-lab", SignalMs: 20, ThresholdMs: 15}}, &fakeEngine{}, nil)
	if n := len(s.snapshot().Resources); n != 1 {
		t.Fatalf("%d resources, want 1", n)
	}
	s.setTopology(topology.Topology{})
	if got := s.snapshot(); len(got.Resources) != 0 {
		t.Errorf("fs-lab still there after it left: %+v", got.Resources)
	}
}

// A scrape copies the totals while the loop adds to them (go test -race).
func TestSLOScrapeDuringTicks(t *testing.T) {
	s := newSLOTotals()
	s.setTopology(sloTopology())
	e := &sloDecider{cur: sloTick{wire: map[netip.Addr]attribution.Counters{sloA: {Sent: 1}}}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 500 {
			snap := []diskstats.Stat{disk("loop1", uint64(i), uint64(i))}
			s.observe(100*time.Millisecond, snap, []status.Resource{{Name: "fs-lab", Source: "ebpf", SignalMs: 20, ThresholdMs: 15}}, e,
				[]throttle.Group{{Name: "m", Members: []netip.Addr{sloB}, WriteDelay: time.Millisecond}})
		}
	}()
	for {
		select {
		case <-done:
			if got := s.snapshot().Resources[0].Reads; got != 499 {
				t.Errorf("reads %d, want 499", got)
			}
			return
		default:
			s.snapshot()
		}
	}
}
