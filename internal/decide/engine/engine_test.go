package engine

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// disk is a fake /proc/diskstats: cumulative counters per device that the
// test advances tick by tick.
type disk struct {
	stats map[string]*diskstats.Stat
	order []string
}

func newDisk(devs ...string) *disk {
	d := &disk{stats: map[string]*diskstats.Stat{}}
	for _, n := range devs {
		d.stats[n] = &diskstats.Stat{Device: n, Fields: 20}
		d.order = append(d.order, n)
	}
	return d
}

// io adds reads (each taking readMsEach) and written kB to a device.
func (d *disk) io(dev string, reads uint64, readMsEach uint64, writeKB uint64) {
	s := d.stats[dev]
	s.ReadIOs += reads
	s.ReadTicks += reads * readMsEach
	s.ReadSectors += reads * 16 // 8 KiB reads
	if writeKB > 0 {
		s.WriteIOs += writeKB / 64
		s.WriteSectors += writeKB * 2
		s.WriteTicks += writeKB / 64
	}
}

func (d *disk) snap(except ...string) []diskstats.Stat {
	var out []diskstats.Stat
outer:
	for _, n := range d.order {
		for _, x := range except {
			if x == n {
				continue outer
			}
		}
		out = append(out, *d.stats[n])
	}
	return out
}

var (
	readerIP = netip.MustParseAddr("10.0.0.2")
	writerIP = netip.MustParseAddr("10.0.0.3")
	otherIP  = netip.MustParseAddr("10.0.0.4")
)

func oneResource(threshold float64) topology.Topology {
	return topology.Topology{Resources: []topology.Resource{{
		Name: "vg-data", ThresholdMs: threshold,
		Consumers: []topology.Consumer{
			{Addr: readerIP, Device: "loop0"},
			{Addr: writerIP, Device: "loop1"},
		},
	}}}
}

// mustEngine builds an engine for an open-loop test: the tests of this
// package script the reads whatever the delay, so the gain rule (step 6
// of package control) would rightly find every delay futile and release
// it. It is off here, unless a test switches rules itself; control's
// TestGainReleases and the simulator test it in closed loop.
func mustEngine(t *testing.T, cfg Config, topo topology.Topology) *Engine {
	t.Helper()
	if cfg.RulesOff == nil {
		cfg.RulesOff = []string{"gain"}
	}
	e, err := New(cfg, topo)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNewValidates(t *testing.T) {
	good := oneResource(0)
	tests := []struct {
		name string
		mod  func(*Config)
		topo topology.Topology
		want string
	}{
		{"zero tick", func(c *Config) { c.Tick = 0 }, good, "tick"},
		{"bad alpha", func(c *Config) { c.Alpha = 2 }, good, "read-latency"},
		{"bad write alpha", func(c *Config) { c.WriteAlpha = 0 }, good, "write-rate"},
		{"unknown controller", func(c *Config) { c.Controller = "fuzzy" }, good, `"pid", "thesis", "none"`},
		{"bad threshold", func(c *Config) { c.ThresholdMs = -1 }, good, "threshold"},
		{"unknown policy", func(c *Config) { c.Policy = "fair" }, good, "read-over-write"},
		{"leave above join", func(c *Config) { c.LeaveKBs = 1000 }, good, "leave"},
		{"bad direction", func(c *Config) { c.Direction = 0 }, good, "direction"},
		{"NaN ceiling limit", func(c *Config) { c.UMaxLimitMs = math.NaN() }, good, "ceiling limit"},
		{"negative ceiling limit", func(c *Config) { c.UMaxLimitMs = -1 }, good, "ceiling limit"},
		{"duplicate resource", func(*Config) {}, topology.Topology{Resources: []topology.Resource{{Name: "a"}, {Name: "a"}}}, "twice"},
		{"unnamed resource", func(*Config) {}, topology.Topology{Resources: []topology.Resource{{}}}, "no name"},
		{"consumer without device", func(*Config) {}, topology.Topology{Resources: []topology.Resource{{Name: "a",
			Consumers: []topology.Consumer{{Addr: readerIP}}}}}, "no block device"},
		{"consumer without address", func(*Config) {}, topology.Topology{Resources: []topology.Resource{{Name: "a",
			Consumers: []topology.Consumer{{Device: "sdb"}}}}}, "no IP address"},
		{"manual name typo", func(c *Config) {
			c.Policy = "manual"
			c.Manual = ManualConfig{Protected: []string{"10.0.0.2"}, Throttle: []string{"loop9"}}
		}, good, "loop9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			_, err := New(cfg, tt.topo)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := New(DefaultConfig(), good); err != nil {
		t.Fatalf("default config rejected: %v", err)
	}
}

// overload runs ticks of a slow reader (50 ms per read) against a
// 20 MB/s writer.
func overload(d *disk) {
	d.io("loop0", 10, 50, 0)
	d.io("loop1", 0, 0, 2000)
}

func TestFirstStepThrottlesNothing(t *testing.T) {
	d := newDisk("loop0", "loop1")
	for i := 0; i < 100; i++ {
		overload(d) // long history before sanqos starts
	}
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	dec := e.Step(time.Unix(100, 0), d.snap())
	r := dec.Resources[0]
	if r.DelayMs != 0 || len(r.Members) != 0 || r.SignalMs != 0 || r.Reads != 0 {
		t.Fatalf("first step decided %+v, want nothing", r)
	}
	for _, g := range dec.Throttles() {
		if len(g.Members) != 0 || g.Delay != 0 {
			t.Fatalf("first step throttles %+v", g)
		}
	}
}

func TestOverloadThrottlesWriterThenWindsDown(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	e.Step(clk.Now(), d.snap())

	var last Decision
	prevDelay := 0.0
	for k := 0; k < 30; k++ {
		clk.Advance(100 * time.Millisecond)
		overload(d)
		last = e.Step(clk.Now(), d.snap())
		r := last.Resources[0]
		if r.RawMs != 50 || r.Reads != 10 {
			t.Fatalf("tick %d: raw %v ms over %d reads, want 50 ms over 10", k, r.RawMs, r.Reads)
		}
		if r.DelayMs < prevDelay {
			t.Fatalf("tick %d: delay fell %v → %v under constant overload", k, prevDelay, r.DelayMs)
		}
		prevDelay = r.DelayMs
	}
	r := last.Resources[0]
	if r.SignalMs < 49 || r.SignalMs > 50 {
		t.Errorf("signal %v after 30 ticks of 50 ms reads, want the EWMA near 50", r.SignalMs)
	}
	if r.DelayMs <= 0 {
		t.Fatalf("no delay after 3 s at 50 ms against a %v ms threshold", r.ThresholdMs)
	}
	if len(r.Members) != 1 || r.Members[0] != writerIP {
		t.Fatalf("members %v, want only the writer %v", r.Members, writerIP)
	}
	for _, c := range last.Consumers {
		switch c.Addr {
		case writerIP:
			if math.Abs(c.WriteKBs-20000) > 1e-6 || !c.Throttleable {
				t.Errorf("writer %+v, want 20000 kB/s and throttleable", c)
			}
		case readerIP:
			if c.Throttleable || c.RAwaitMs != 50 || math.Abs(c.ReadKBs-800) > 1e-6 {
				t.Errorf("reader %+v, want not throttleable, r_await 50, 800 kB/s", c)
			}
		}
	}
	g := last.Throttles()[0]
	if g.Name != "vg-data" || len(g.Members) != 1 || g.Delay <= 0 || g.Direction != direction.Write {
		t.Fatalf("throttle %+v, want the writer with a write delay", g)
	}

	// The load stops: no reads, no writes. The signal decays, the delay
	// winds down to 0 and the writer leaves the set.
	var k int
	for k = 0; k < 600; k++ {
		clk.Advance(100 * time.Millisecond)
		last = e.Step(clk.Now(), d.snap())
		if last.Resources[0].DelayMs == 0 && len(last.Resources[0].Members) == 0 {
			break
		}
	}
	if k == 600 {
		t.Fatalf("still throttling 60 s after the load stopped: %+v", last.Resources[0])
	}
	if g := last.Throttles()[0]; len(g.Members) != 0 || g.Delay != 0 {
		t.Fatalf("idle resource still throttled: %+v", g)
	}
}

func TestHealthyResourceNotThrottled(t *testing.T) {
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	for k := 0; k < 200; k++ {
		now = now.Add(100 * time.Millisecond)
		d.io("loop0", 10, 5, 0) // 5 ms reads: healthy
		d.io("loop1", 0, 0, 5000)
		dec := e.Step(now, d.snap())
		if r := dec.Resources[0]; r.DelayMs != 0 {
			t.Fatalf("tick %d: delay %v with 5 ms reads", k, r.DelayMs)
		}
		// The heavy writer is in the set (it is throttleable) but with no
		// delay the throttle state has no members.
		if g := dec.Throttles()[0]; len(g.Members) != 0 {
			t.Fatalf("tick %d: healthy resource's group has members %v", k, g.Members)
		}
	}
}

func TestRatesUseRealElapsedTime(t *testing.T) {
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	d.io("loop1", 0, 0, 1000)
	now = now.Add(250 * time.Millisecond) // a late tick
	dec := e.Step(now, d.snap())
	for _, c := range dec.Consumers {
		if c.Addr == writerIP && math.Abs(c.WriteKBs-4000) > 1e-6 {
			t.Fatalf("1000 kB in 250 ms reported as %v kB/s, want 4000", c.WriteKBs)
		}
	}
}

func TestPerResourceThreshold(t *testing.T) {
	topo := topology.Topology{Resources: []topology.Resource{
		{Name: "strict", Consumers: []topology.Consumer{{Addr: readerIP, Device: "loop0"}, {Addr: writerIP, Device: "loop1"}}},
		{Name: "lenient", ThresholdMs: 100, Consumers: []topology.Consumer{{Addr: otherIP, Device: "loop2"}, {Addr: writerIP, Device: "loop3"}}},
	}}
	d := newDisk("loop0", "loop1", "loop2", "loop3")
	e := mustEngine(t, DefaultConfig(), topo)
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	var dec Decision
	for k := 0; k < 30; k++ {
		now = now.Add(100 * time.Millisecond)
		overload(d)
		d.io("loop2", 10, 50, 0)
		d.io("loop3", 0, 0, 2000)
		dec = e.Step(now, d.snap())
	}
	strict, lenient := dec.Resources[0], dec.Resources[1]
	if strict.ThresholdMs != DefaultConfig().ThresholdMs || lenient.ThresholdMs != 100 {
		t.Fatalf("thresholds %v and %v, want default and 100", strict.ThresholdMs, lenient.ThresholdMs)
	}
	if strict.DelayMs == 0 || lenient.DelayMs != 0 {
		t.Fatalf("delays strict %v lenient %v: want only the strict resource throttled", strict.DelayMs, lenient.DelayMs)
	}
}

func TestMissingDevicesAreSkippedAndCounted(t *testing.T) {
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	now = now.Add(100 * time.Millisecond)
	overload(d)
	dec := e.Step(now, d.snap("loop1"))
	if dec.MissingDevices != 1 || dec.Resources[0].MissingDevices != 1 {
		t.Fatalf("missing %d / %d, want 1", dec.MissingDevices, dec.Resources[0].MissingDevices)
	}
	if dec.Resources[0].RawMs != 50 {
		t.Fatalf("present device not measured: %+v", dec.Resources[0])
	}
	// loop1 comes back: its delta spans both ticks and its rate uses the
	// 200 ms since its last snapshot.
	now = now.Add(100 * time.Millisecond)
	overload(d)
	dec = e.Step(now, d.snap())
	for _, c := range dec.Consumers {
		if c.Device == "loop1" && math.Abs(c.WriteKBs-20000) > 1e-6 {
			t.Fatalf("returning device's write rate %v, want 20000 kB/s", c.WriteKBs)
		}
	}
	// Every device gone: not fatal, and treated as idle.
	now = now.Add(100 * time.Millisecond)
	dec = e.Step(now, nil)
	if dec.MissingDevices != 2 || dec.Resources[0].Reads != 0 {
		t.Fatalf("empty snapshot: %+v", dec)
	}
}

func TestCounterWrapAcrossSteps(t *testing.T) {
	d := newDisk("loop0", "loop1")
	s := d.stats["loop0"]
	s.ReadIOs, s.ReadTicks = 1<<32-5, 1<<32-100
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	s.ReadIOs, s.ReadTicks = 5, 300 // +10 reads, +400 ms across the wrap
	dec := e.Step(now.Add(100*time.Millisecond), d.snap())
	if r := dec.Resources[0]; r.Reads != 10 || r.RawMs != 40 {
		t.Fatalf("across wrap: %d reads raw %v ms, want 10 reads at 40 ms", r.Reads, r.RawMs)
	}
}

func TestSetTopologyKeepsPersistentState(t *testing.T) {
	d := newDisk("loop0", "loop1", "loop5", "loop6")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	var before Decision
	for k := 0; k < 20; k++ {
		now = now.Add(100 * time.Millisecond)
		overload(d)
		before = e.Step(now, d.snap())
	}
	if before.Resources[0].DelayMs == 0 {
		t.Fatal("setup: no throttling")
	}
	// Rediscovery: the same resource, plus a new one with a new device.
	topo := oneResource(0)
	topo.Resources = append(topo.Resources, topology.Resource{Name: "vg-new",
		Consumers: []topology.Consumer{{Addr: otherIP, Device: "loop5"}, {Addr: writerIP, Device: "loop6"}}})
	e.SetTopology(topo)
	now = now.Add(100 * time.Millisecond)
	overload(d)
	d.io("loop5", 10, 80, 0)
	d.io("loop6", 0, 0, 5000)
	after := e.Step(now, d.snap())
	old, fresh := after.Resources[0], after.Resources[1]
	if old.DelayMs < before.Resources[0].DelayMs || old.SignalMs < before.Resources[0].SignalMs-1 {
		t.Fatalf("persisting resource lost state: before %+v after %+v", before.Resources[0], old)
	}
	if len(old.Members) != 1 {
		t.Fatalf("persisting writer lost its membership: %v", old.Members)
	}
	// loop5/loop6 are first seen now: nothing measured, nothing throttled.
	if fresh.DelayMs != 0 || len(fresh.Members) != 0 || fresh.SignalMs != 0 {
		t.Fatalf("new resource not at rest: %+v", fresh)
	}
	// A threshold change moves the controller's set point and keeps the
	// signal and the delay, which then follows the new set point down
	// (see "Reloads"): no restart from 0.
	topo.Resources[0].ThresholdMs = 500
	e.SetTopology(topo)
	now = now.Add(100 * time.Millisecond)
	overload(d)
	dec := e.Step(now, d.snap())
	if r := dec.Resources[0]; r.DelayMs == 0 || r.DelayMs >= old.DelayMs || r.SignalMs < 40 || r.ThresholdMs != 500 {
		t.Fatalf("after raising the threshold to 500: %+v, want the old signal and a delay under %v, not 0", r, old.DelayMs)
	}
	for range 50 {
		now = now.Add(100 * time.Millisecond)
		overload(d)
		dec = e.Step(now, d.snap())
	}
	if r := dec.Resources[0]; r.DelayMs != 0 {
		t.Fatalf("5 s at 50 ms under a 500 ms threshold: delay %v, want 0", r.DelayMs)
	}
}

func TestManualPolicy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = "manual"
	cfg.Manual = ManualConfig{Protected: []string{readerIP.String()}, Throttle: []string{"loop2"}}
	topo := topology.Topology{Resources: []topology.Resource{{Name: "r", Consumers: []topology.Consumer{
		{Addr: readerIP, Device: "loop0"},
		{Addr: writerIP, Device: "loop1"}, // heavy writer, not named: never throttled
		{Addr: otherIP, Device: "loop2"},  // named, writes nothing
	}}}}
	d := newDisk("loop0", "loop1", "loop2")
	e := mustEngine(t, cfg, topo)
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	var dec Decision
	for k := 0; k < 20; k++ {
		now = now.Add(100 * time.Millisecond)
		d.io("loop0", 10, 40, 0)
		d.io("loop1", 100, 1000, 50000) // slow reads of an unprotected consumer don't count
		dec = e.Step(now, d.snap())
	}
	r := dec.Resources[0]
	if r.RawMs != 40 {
		t.Fatalf("signal taken from %v ms, want only the protected reader's 40 ms", r.RawMs)
	}
	if r.DelayMs == 0 || len(r.Members) != 1 || r.Members[0] != otherIP {
		t.Fatalf("manual: delay %v members %v, want a delay on %v only", r.DelayMs, r.Members, otherIP)
	}
}

func TestThrottlesDirections(t *testing.T) {
	dec := Decision{Resources: []ResourceDecision{
		{Name: "a", DelayMs: 2.5, Members: []netip.Addr{writerIP}, Direction: direction.Both},
		{Name: "b", DelayMs: 1, Members: []netip.Addr{writerIP}, Direction: direction.Read},
		{Name: "c", DelayMs: 0, Members: []netip.Addr{writerIP}, Direction: direction.Write},
		{Name: "d", DelayMs: 3, Direction: direction.Write},
	}}
	want := []Throttle{
		{Name: "a", Members: []netip.Addr{writerIP}, Direction: direction.Both, Delay: 2500 * time.Microsecond},
		{Name: "b", Members: []netip.Addr{writerIP}, Direction: direction.Read, Delay: time.Millisecond},
		{Name: "c", Direction: direction.Write},
		{Name: "d", Direction: direction.Write},
	}
	got := dec.Throttles()
	if len(got) != len(want) {
		t.Fatalf("%d throttles, want %d", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Name != w.Name || len(g.Members) != len(w.Members) || g.Direction != w.Direction || g.Delay != w.Delay {
			t.Errorf("throttle %d = %+v, want %+v", i, g, w)
		}
	}
}

// The thesis controller runs through the same engine.
func TestThesisControllerThroughEngine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Controller = "thesis"
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, cfg, oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	var dec Decision
	for k := 0; k < 20; k++ {
		now = now.Add(100 * time.Millisecond)
		overload(d)
		dec = e.Step(now, d.snap())
	}
	if r := dec.Resources[0]; r.DelayMs <= 0 || r.DelayMs > cfg.Control.UMaxMs {
		t.Fatalf("thesis controller delay %v, want in (0, %v]", r.DelayMs, cfg.Control.UMaxMs)
	}
}

func TestRepeatedTimestampKeepsGrowth(t *testing.T) {
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	e.Step(now, d.snap())
	now = now.Add(100 * time.Millisecond)
	d.io("loop1", 0, 0, 1000)
	e.Step(now, d.snap())
	d.io("loop1", 0, 0, 1000)
	dec := e.Step(now, d.snap()) // same timestamp: nothing measurable
	if dec.Consumers[1].WriteKBs != 0 {
		t.Fatalf("zero-length interval gave %v kB/s", dec.Consumers[1].WriteKBs)
	}
	now = now.Add(100 * time.Millisecond)
	d.io("loop1", 0, 0, 1000)
	dec = e.Step(now, d.snap())
	// 2000 kB since the last measured snapshot, 100 ms ago.
	if got := dec.Consumers[1].WriteKBs; math.Abs(got-20000) > 1e-6 {
		t.Fatalf("write rate %v kB/s after a repeated timestamp, want 20000", got)
	}
}

// TestSignalAggregationTable: one measured tick per case, after a first
// Step at zero counters; the EWMA starts at 0 so SignalMs = α·RawMs.
func TestSignalAggregationTable(t *testing.T) {
	type ioOp struct {
		dev           string
		reads, msEach uint64
		writeKB       uint64
	}
	tests := []struct {
		name      string
		ops       []ioOp
		wantReads uint64
		wantRaw   float64
		members   int
	}{
		{"idle", nil, 0, 0, 0},
		{"one device", []ioOp{{"loop0", 4, 10, 0}}, 4, 10, 0},
		{"request-weighted over devices", []ioOp{{"loop0", 1, 100, 0}, {"loop1", 9, 10, 0}}, 10, 19, 0},
		{"writer only", []ioOp{{"loop1", 0, 0, 100000}}, 0, 0, 1},
		{"both", []ioOp{{"loop0", 2, 30, 0}, {"loop1", 0, 0, 100000}}, 2, 30, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.WriteAlpha = 1 // membership from this tick's rate alone
			d := newDisk("loop0", "loop1")
			e := mustEngine(t, cfg, oneResource(0))
			e.Step(time.Unix(0, 0), d.snap())
			for _, op := range tt.ops {
				d.io(op.dev, op.reads, op.msEach, op.writeKB)
			}
			r := e.Step(time.Unix(0, int64(100*time.Millisecond)), d.snap()).Resources[0]
			if r.Reads != tt.wantReads || math.Abs(r.RawMs-tt.wantRaw) > 1e-9 {
				t.Errorf("reads %d raw %v, want %d and %v", r.Reads, r.RawMs, tt.wantReads, tt.wantRaw)
			}
			if want := cfg.Alpha * tt.wantRaw; math.Abs(r.SignalMs-want) > 1e-9 {
				t.Errorf("signal %v, want α·raw = %v", r.SignalMs, want)
			}
			if len(r.Members) != tt.members {
				t.Errorf("members %v, want %d", r.Members, tt.members)
			}
		})
	}
}

func TestManualPolicyAcceptsEmptyTopology(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = policy.ManualName
	cfg.Manual = ManualConfig{Protected: []string{"10.0.0.2"}, Throttle: []string{"10.0.0.3"}}
	if _, err := New(cfg, topology.Topology{}); err != nil {
		t.Fatalf("manual policy before discovery found anything: %v", err)
	}
	topo := topology.Topology{Resources: []topology.Resource{{Name: "r", Consumers: []topology.Consumer{
		{Addr: netip.MustParseAddr("10.0.0.9"), Device: "loop9"},
	}}}}
	if _, err := New(cfg, topo); err == nil {
		t.Fatal("manual names matching no known consumer were accepted")
	}
}

// A writer that pauses leaves the set and is no longer held (DelayMs 0),
// but the controller keeps its output: when the writer comes back it
// meets that delay at once, not a ramp from 0 that lets its first second
// through and spikes the readers' latency.
func TestPausedWriterMeetsTheDelayItLeft(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	d := newDisk("loop0", "loop1")
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	e.Step(clk.Now(), d.snap())
	step := func() ResourceDecision {
		clk.Advance(100 * time.Millisecond)
		return e.Step(clk.Now(), d.snap()).Resources[0]
	}
	var r ResourceDecision
	for range 30 {
		overload(d)
		r = step()
	}
	if r.DelayMs <= 0 || r.DelayMs != r.ControlMs || len(r.Members) != 1 {
		t.Fatalf("under overload: %+v, want the writer held at the controller's output", r)
	}
	// The writer pauses for 3 s; the reader goes on at 12 ms, a little
	// under the set point, so the controller winds down only slowly.
	var left bool
	for range 30 {
		d.io("loop0", 10, 12, 0)
		r = step()
		if len(r.Members) == 0 {
			left = true
			if r.DelayMs != 0 {
				t.Fatalf("set empty but delay %v ms reported as applied", r.DelayMs)
			}
		}
	}
	if !left {
		t.Fatalf("writer still in the set after a 3 s pause: %+v", r)
	}
	if r.ControlMs <= 0 {
		t.Fatalf("controller output %v after the pause, want it kept above 0 (signal %.1f under the set point %.2f only a little)", r.ControlMs, r.SignalMs, r.TargetMs)
	}
	kept := r.ControlMs
	if g := e.Step(clk.Now(), d.snap()).Throttles()[0]; len(g.Members) != 0 || g.Delay != 0 {
		t.Fatalf("paused resource still throttled: %+v", g)
	}
	overload(d)
	r = step()
	if len(r.Members) != 1 || r.DelayMs < kept {
		t.Fatalf("writer back: %+v, want it in the set at once with at least the kept %.2f ms", r, kept)
	}
}
