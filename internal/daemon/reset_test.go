package daemon

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// resetStats: loop1 serves a slow reader (the resource is over its
// threshold all along); loop2 serves an idle consumer whose device is
// re-created at tick resetAt, its counters starting again near zero.
type resetStats struct {
	tick, resetAt  int
	r1, rt1, base2 uint64
}

func (s *resetStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) {
	s.tick++
	s.r1 += 10
	s.rt1 += 10 * 60
	w := s.base2
	if s.tick >= s.resetAt {
		w = 16 // a few sectors of the new device's own setup
	}
	return []diskstats.Stat{
		{Major: 7, Minor: 1, Device: "loop1", Fields: 20, ReadIOs: s.r1, ReadTicks: s.rt1},
		{Major: 7, Minor: 2, Device: "loop2", Fields: 20, WriteSectors: w, WriteIOs: w / 8},
	}, nil, nil
}

// Finding 7 of issue 14, with the real engine: an idle consumer whose
// loop device was re-attached was read as a 32-bit wrap, reported at
// 6.5e9 kB/s and throttled for 5.5 s. Its counters now re-baseline.
func TestCounterResetDoesNotMakeAWriter(t *testing.T) {
	reader, idle := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"}, {Addr: idle, Device: "loop2"},
	}}}}
	e, err := engine.New(openLoopConfig(), topo)
	if err != nil {
		t.Fatal(err)
	}
	stats := &resetStats{resetAt: 30, base2: 3_000_000} // 1.5 GB written long ago
	be := &fakeBackend{}
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: FromEngine(e, []uint16{3260}, nil), Stats: stats, Backend: be,
		Logger: newLogger(&logBuf{}), Topology: topo})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	maxKBs := 0.0
	for range 100 {
		now = now.Add(100 * time.Millisecond)
		d.tick(context.Background(), now)
		s := d.Status()
		for _, c := range s.Consumers {
			if c.Addr == idle.String() {
				maxKBs = max(maxKBs, c.WriteKBs)
			}
		}
		for _, r := range s.Resources {
			for _, m := range r.Members {
				if m == idle.String() {
					t.Fatalf("tick at %v: the idle consumer is in the throttleable set (write %v kB/s)", now.Sub(t0), maxKBs)
				}
			}
		}
	}
	if maxKBs > 1000 {
		t.Errorf("the idle consumer was reported writing %.0f kB/s across its device's reset", maxKBs)
	}
}
