package daemon

import (
	"context"
	"encoding/json"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// reloadRig is the daemon with the production engine over loadStats: a
// reader on loop1 whose reads take stats.readMs, a writer on loop2.
type reloadRig struct {
	t     *testing.T
	d     *Daemon
	stats *loadStats
	be    *fakeBackend
	topo  topology.Topology
	now   time.Time
}

func newReloadRig(t *testing.T) *reloadRig {
	t.Helper()
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	r := &reloadRig{t: t, stats: &loadStats{readMs: 100, writeKBs: 100000}, be: &fakeBackend{}, now: t0,
		topo: topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
			{Addr: reader, Device: "loop1"}, {Addr: writer, Device: "loop2"},
		}}}}}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: r.engine(), Stats: r.stats, Backend: r.be,
		Logger: newLogger(&logBuf{}), Topology: r.topo})
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	return r
}

// engine is a fresh engine of the rig's (unchanged) configuration, as
// cmd/sanqos's reload builds one.
func (r *reloadRig) engine() Decider {
	e, err := engine.New(openLoopConfig(), r.topo)
	if err != nil {
		r.t.Fatal(err)
	}
	return FromEngine(e, []uint16{3260}, nil)
}

func (r *reloadRig) reload() {
	r.d.Reload(Reload{Decider: r.engine(), Topology: &r.topo})
}

func (r *reloadRig) tick() {
	r.now = r.now.Add(100 * time.Millisecond)
	r.d.tick(context.Background(), r.now)
}

// view is what /status says of the resource (through its JSON, as a
// client reads it) and what the backend last had applied.
type view struct {
	delay, control, ceiling, inForce float64
	hasInForce                       bool
	applied                          float64 // ms, the backend's last state
}

func (r *reloadRig) view() view {
	r.t.Helper()
	b, err := json.Marshal(r.d.Status())
	if err != nil {
		r.t.Fatal(err)
	}
	var s struct {
		Resources []map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(b, &s); err != nil || len(s.Resources) != 1 {
		r.t.Fatalf("status %s: %v", b, err)
	}
	res := s.Resources[0]
	num := func(k string) float64 { f, _ := res[k].(float64); return f }
	v := view{delay: num("delay_ms"), control: num("control_ms"), ceiling: num("u_max_ms"), inForce: num("in_force_ms")}
	_, v.hasInForce = res["in_force_ms"]
	r.be.mu.Lock()
	defer r.be.mu.Unlock()
	if n := len(r.be.applied); n > 0 && len(r.be.applied[n-1].Groups) > 0 {
		v.applied = float64(r.be.applied[n-1].Groups[0].WriteDelay) / float64(time.Millisecond)
	}
	return v
}

// N4: a reload of an unchanged configuration during interference keeps
// the delay and its raised ceiling: the new engine takes over the old
// one's state rather than starting at rest and re-learning for seconds.
// /status says what is in force.
func TestReloadKeepsDelayAndCeiling(t *testing.T) {
	r := newReloadRig(t)
	for range 100 {
		r.tick()
	}
	before := r.view()
	if before.ceiling < 100 || before.delay < 50 {
		t.Fatalf("after 10 s of 100 ms reads: delay %v ms, ceiling %v ms; want both raised", before.delay, before.ceiling)
	}
	r.reload()
	for i := range 30 {
		r.tick()
		v := r.view()
		if v.delay < 0.9*before.delay || v.ceiling < 0.9*before.ceiling {
			t.Fatalf("%d ms after the reload: delay %v ms, ceiling %v ms; before it %v and %v",
				(i+1)*100, v.delay, v.ceiling, before.delay, before.ceiling)
		}
		if !v.hasInForce || v.inForce != v.applied {
			t.Fatalf("%d ms after the reload: status in_force_ms %v (present %v), the backend has %v ms",
				(i+1)*100, v.inForce, v.hasInForce, v.applied)
		}
	}
}

// N4: a storm of reloads (24 in 12 s) while the disk turns healthy must
// not freeze the delay in force: it follows the disk down as it does
// without reloads, and /status reports what the backend has.
func TestReloadStormFollowsTheDisk(t *testing.T) {
	calm := releaseAfterHealth(t, 0)
	storm := releaseAfterHealth(t, 5)
	t.Logf("delay in force released %v after the disk became healthy without reloads, %v with a reload every 500 ms", calm, storm)
	if storm < 0 || storm > calm {
		t.Fatalf("the disk healthy and 24 reloads in 12 s: delay in force released after %v (-1: never); without reloads after %v", storm, calm)
	}
	if calm < 0 || calm > 8*time.Second {
		t.Fatalf("without reloads the delay in force was released after %v (-1: never), want within 8 s", calm)
	}
}

// releaseAfterHealth raises the delay, makes the disk healthy and, with
// a reload every `every` ticks (0: none) for 12 s, returns how long the
// backend kept a delay after the disk became healthy (-1: to the end).
func releaseAfterHealth(t *testing.T, every int) time.Duration {
	r := newReloadRig(t)
	for range 100 {
		r.tick()
	}
	if v := r.view(); v.applied < 50 {
		t.Fatalf("before the storm the backend holds %v ms, want a raised delay", v.applied)
	}
	r.stats.readMs = 1
	var zeroAt time.Duration = -1
	for i := range 120 {
		if every > 0 && i%every == 0 {
			r.reload()
		}
		r.tick()
		at := time.Duration(i+1) * 100 * time.Millisecond
		v := r.view()
		if !v.hasInForce || v.inForce != v.applied {
			t.Fatalf("%v into the storm: status in_force_ms %v (present %v), the backend has %v ms", at, v.inForce, v.hasInForce, v.applied)
		}
		if v.applied == 0 && zeroAt < 0 {
			zeroAt = at
		}
		if v.applied != 0 && zeroAt >= 0 {
			t.Fatalf("the delay in force came back to %v ms %v into the storm", v.applied, at)
		}
	}
	return zeroAt
}

// recordingWire is a fakeWire that remembers every client list it was
// given.
type recordingWire struct {
	*fakeWire
	sets [][]netip.Addr
}

func (w *recordingWire) SetClients(a []netip.Addr) error {
	w.sets = append(w.sets, slices.Clone(a))
	return w.fakeWire.SetClients(a)
}

// A reload of a discovered topology with wire counters: the new engine is
// built without the topology (the loop has it), so the reload must leave
// the counted clients alone (emptying the sets would reset their
// counters), and the new engine must judge the writer by its wire rate
// from its first tick, as the old one did.
func TestReloadKeepsWireRates(t *testing.T) {
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-nfs", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"}, {Addr: writer, Device: "loop1"},
	}}}}
	fw := &recordingWire{fakeWire: &fakeWire{reader: reader, writer: writer}}
	build := func(t0 topology.Topology) Decider {
		e, err := engine.New(openLoopConfig(), t0)
		if err != nil {
			t.Fatal(err)
		}
		return WithWire(FromEngine(e, []uint16{2049}, nil), fw, t0, nil)
	}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: build(topo), Stats: &sharedStats{}, Backend: &fakeBackend{},
		Logger: newLogger(&logBuf{}), Topology: topo})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	tick := func() {
		now = now.Add(100 * time.Millisecond)
		d.tick(context.Background(), now)
	}
	for range 30 {
		tick()
	}
	// As cmd/sanqos reloads a discovered topology: the engine is built
	// from the configuration's (empty) topology.
	d.Reload(Reload{Decider: build(topology.Topology{})})
	for i := range 10 {
		tick()
		s := d.Status()
		for _, c := range s.Consumers {
			if c.Addr == writer.String() && (c.WriteFrom != "wire" || c.WriteKBs < 19000 || !c.Throttleable) {
				t.Fatalf("tick %d after the reload: writer %+v, want its wire rate of 20 MB/s and in the set", i+1, c)
			}
		}
	}
	for i, s := range fw.sets {
		if len(s) != 2 {
			t.Errorf("client list %d given to the wire counters: %v, want both consumers", i, s)
		}
	}
}
