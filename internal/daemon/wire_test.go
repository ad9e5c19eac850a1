package daemon

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// sharedStats is one device (an NFS export's) with slow reads and 20 MB/s
// of writes: which client writes, it cannot say.
type sharedStats struct{ r, rt, ws uint64 }

func (s *sharedStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) {
	s.r, s.rt, s.ws = s.r+10, s.rt+600, s.ws+20000*2/10
	return []diskstats.Stat{{Major: 7, Minor: 1, Device: "loop1", Fields: 20, ReadIOs: s.r, ReadTicks: s.rt, WriteSectors: s.ws, WriteIOs: s.ws / 128}}, nil, nil
}

// fakeWire counts 2 MB per tick sent by the writer, 100 bytes by the reader.
type fakeWire struct {
	reader, writer netip.Addr
	c              map[netip.Addr]attribution.Counters
	clients        []netip.Addr
}

func (f *fakeWire) SetClients(a []netip.Addr) error { f.clients = slices.Clone(a); return nil }
func (f *fakeWire) Read() (map[netip.Addr]attribution.Counters, error) {
	if f.c == nil {
		f.c = map[netip.Addr]attribution.Counters{}
	}
	w, r := f.c[f.writer], f.c[f.reader]
	w.Sent += 20000 * 1024 / 10 // 20000 KiB/s, as the device (diskstats' KiB)
	r.Sent += 100
	r.Received += 25600
	f.c[f.writer], f.c[f.reader] = w, r
	return cloneCounters(f.c), nil
}

func cloneCounters(m map[netip.Addr]attribution.Counters) map[netip.Addr]attribution.Counters {
	out := make(map[netip.Addr]attribution.Counters, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Two clients of one device: with wire counters only the writer is
// throttled; without, the reader is too (the finding).
func TestWireAttributionInTheLoop(t *testing.T) {
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-nfs", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"}, {Addr: writer, Device: "loop1"},
	}}}}
	for _, tc := range []struct {
		name string
		wire bool
		want []string
		from string // every consumer's WriteFrom in /status
	}{
		{"wire counters", true, []string{writer.String()}, "wire"},
		{"device rates only", false, []string{reader.String(), writer.String()}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.New(openLoopConfig(), topo)
			if err != nil {
				t.Fatal(err)
			}
			eng := FromEngine(e, []uint16{2049}, nil)
			fw := &fakeWire{reader: reader, writer: writer}
			if tc.wire {
				eng = WithWire(eng, fw, topo, nil)
				if len(fw.clients) != 2 {
					t.Fatalf("wire counts %v, want both consumers", fw.clients)
				}
			}
			d, err := New(Options{Clock: clock.NewFake(t0), Decider: eng, Stats: &sharedStats{}, Backend: &fakeBackend{},
				Logger: newLogger(&logBuf{}), Topology: topo})
			if err != nil {
				t.Fatal(err)
			}
			now := t0
			for range 50 {
				now = now.Add(100 * time.Millisecond)
				d.tick(context.Background(), now)
			}
			s := d.Status()
			if len(s.Resources) != 1 || !s.Resources[0].Throttling() {
				t.Fatalf("not throttling after 5 s of 60 ms reads: %+v", s.Resources)
			}
			if m := s.Resources[0].Members; !slices.Equal(m, tc.want) {
				t.Errorf("members %v, want %v", m, tc.want)
			}
			if len(s.Consumers) != 2 {
				t.Fatalf("status has %d consumers, want 2", len(s.Consumers))
			}
			for _, c := range s.Consumers {
				if c.WriteFrom != tc.from {
					t.Errorf("consumer %s: write rate from %q, want %q", c.Addr, c.WriteFrom, tc.from)
				}
				// The device writes 20000 KiB/s; on the wire the writer
				// sends as much, the reader 100 B a tick: 1 kB/s, which
				// is 0.977 KiB/s, the unit of the rates (issue 34).
				want := 20000.0
				if tc.wire && c.Addr == reader.String() {
					want = 1000.0 / 1024
				}
				if c.WriteKBs < 0.99*want || c.WriteKBs > 1.01*want {
					t.Errorf("consumer %s: write_kbs %.3f, want %.3f", c.Addr, c.WriteKBs, want)
				}
			}
		})
	}
}

// brokenWire fails every read.
type brokenWire struct{}

func (brokenWire) SetClients([]netip.Addr) error { return nil }
func (brokenWire) Read() (map[netip.Addr]attribution.Counters, error) {
	return nil, errors.New("netlink: no such set")
}

// When the counters cannot be read, clients of a shared device count as
// not writing (nobody is delayed on a guess), and the log says so once.
func TestWireReadFailureFailsOpen(t *testing.T) {
	reader, writer := netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-nfs", Consumers: []topology.Consumer{
		{Addr: reader, Device: "loop1"}, {Addr: writer, Device: "loop1"},
	}}}}
	e, err := engine.New(openLoopConfig(), topo)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuf{}
	eng := WithWire(FromEngine(e, []uint16{2049}, nil), brokenWire{}, topo, newLogger(logs))
	d, err := New(Options{Clock: clock.NewFake(t0), Decider: eng, Stats: &sharedStats{}, Backend: &fakeBackend{},
		Logger: newLogger(&logBuf{}), Topology: topo})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	for range 30 {
		now = now.Add(100 * time.Millisecond)
		d.tick(context.Background(), now)
	}
	if m := d.Status().Resources[0].Members; len(m) != 0 {
		t.Errorf("members %v with unreadable wire counters, want none", m)
	}
	if n := logs.count("reading wire counters failed"); n != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", n, logs)
	}
}
