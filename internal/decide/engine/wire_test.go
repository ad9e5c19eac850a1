package engine

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/attribution"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// TestWireRatesJudgeSharedDevices: with the engine's own policy, the
// throttleable set is built from the clients' wire rates where they share
// a device, from device rates where each has its own, and from device
// rates everywhere without wire rates (SetWire never called).
func TestWireRatesJudgeSharedDevices(t *testing.T) {
	shared := topology.Topology{Resources: []topology.Resource{{Name: "fs-nfs", Consumers: []topology.Consumer{
		{Addr: readerIP, Device: "loop0"}, {Addr: writerIP, Device: "loop0"},
	}}}}
	own := oneResource(0) // reader on loop0, writer on loop1
	// The wire: 20 MB/s from the writer, 1 kB/s from the reader; and the
	// other way round, to show that on devices of their own the wire is
	// not what counts.
	truth := map[netip.Addr]attribution.Rates{writerIP: {WriteKBs: 20000}, readerIP: {WriteKBs: 1, ReadKBs: 256}}
	upside := map[netip.Addr]attribution.Rates{writerIP: {WriteKBs: 1}, readerIP: {WriteKBs: 20000}}
	sharedLoad := func(d *disk) { d.io("loop0", 10, 50, 2000) }
	tests := []struct {
		name string
		topo topology.Topology
		load func(d *disk)
		wire map[netip.Addr]attribution.Rates // nil: SetWire not called
		want []netip.Addr
		from string
	}{
		{"shared device, wire rates", shared, sharedLoad, truth, []netip.Addr{writerIP}, "wire"},
		{"shared device, no wire rates: both look like writers", shared, sharedLoad, nil, []netip.Addr{readerIP, writerIP}, ""},
		{"own devices: device rates, whatever the wire says", own, overload, upside, []netip.Addr{writerIP}, "device"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDisk("loop0", "loop1")
			e := mustEngine(t, DefaultConfig(), tc.topo)
			now := time.Unix(1000, 0)
			var dec Decision
			for range 30 {
				tc.load(d)
				if tc.wire != nil {
					e.SetWire(tc.wire)
				}
				dec = e.Step(now, d.snap())
				now = now.Add(100 * time.Millisecond)
			}
			if got := dec.Resources[0].Members; !slices.Equal(got, tc.want) {
				t.Errorf("members %v, want %v", got, tc.want)
			}
			if len(dec.Consumers) != 2 {
				t.Fatalf("%d consumers decided, want 2", len(dec.Consumers))
			}
			for _, c := range dec.Consumers {
				if c.WriteFrom != tc.from {
					t.Errorf("consumer %s: write rate from %q, want %q", c.Addr, c.WriteFrom, tc.from)
				}
			}
		})
	}
}
