package attribution

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/policy"
	"github.com/sanqos/sanqos/internal/decide/smoothing"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

var (
	reader = netip.MustParseAddr("10.0.0.2")
	w1     = netip.MustParseAddr("10.0.0.3")
	w2     = netip.MustParseAddr("10.0.0.4")
)

// TestThrottleableSet builds the read-over-write policy's throttleable
// set (500 kB/s to join, as the configuration's default) over ten ticks
// from the rates Choose picks: wire rates where clients share a device,
// device rates where each has its own.
func TestThrottleableSet(t *testing.T) {
	tests := []struct {
		name      string
		consumers []Consumer
		device    map[string]Rates // per device, every tick
		wire      map[netip.Addr]Rates
		want      []netip.Addr
		wantSrc   Source // of the reader
	}{
		{
			name:      "NFS: one export, a reader and two writers: the wire tells them apart",
			consumers: []Consumer{{reader, "loop1"}, {w1, "loop1"}, {w2, "loop1"}},
			device:    map[string]Rates{"loop1": {WriteKBs: 40000, ReadKBs: 256}},
			wire:      map[netip.Addr]Rates{reader: {WriteKBs: 2, ReadKBs: 256}, w1: {WriteKBs: 20000}, w2: {WriteKBs: 20000}},
			want:      []netip.Addr{w1, w2},
			wantSrc:   Wire,
		},
		{
			name:      "NFS without wire counters: every client looks like a writer (the issue's finding)",
			consumers: []Consumer{{reader, "loop1"}, {w1, "loop1"}, {w2, "loop1"}},
			device:    map[string]Rates{"loop1": {WriteKBs: 40000, ReadKBs: 256}},
			want:      []netip.Addr{reader, w1, w2},
			wantSrc:   Device,
		},
		{
			name:      "iSCSI: a LUN each: device rates stay, whatever the wire says",
			consumers: []Consumer{{reader, "loop1"}, {w1, "loop2"}, {w2, "loop3"}},
			device:    map[string]Rates{"loop1": {ReadKBs: 256}, "loop2": {WriteKBs: 20000}, "loop3": {WriteKBs: 100}},
			// The wire counts requests and retransmissions too; where the
			// device is a client's own, the disk's view wins.
			wire:    map[netip.Addr]Rates{reader: {WriteKBs: 900}, w1: {WriteKBs: 100}, w2: {WriteKBs: 20000}},
			want:    []netip.Addr{w1},
			wantSrc: Device,
		},
		{
			name:      "mixed: a shared export and a LUN of its own",
			consumers: []Consumer{{reader, "loop1"}, {w1, "loop1"}, {w2, "loop2"}},
			device:    map[string]Rates{"loop1": {WriteKBs: 20000, ReadKBs: 256}, "loop2": {WriteKBs: 20000}},
			wire:      map[netip.Addr]Rates{reader: {ReadKBs: 256}, w1: {WriteKBs: 20000}, w2: {WriteKBs: 1}},
			want:      []netip.Addr{w1, w2},
			wantSrc:   Wire,
		},
		{
			// Found live: a reader just discovered joined the set for
			// two seconds on its device's rate, and was delayed.
			name:      "shared, a client the wire has not measured yet: not a writer",
			consumers: []Consumer{{reader, "loop1"}, {w1, "loop1"}},
			device:    map[string]Rates{"loop1": {WriteKBs: 20000}},
			wire:      map[netip.Addr]Rates{w1: {WriteKBs: 20000}},
			want:      []netip.Addr{w1},
			wantSrc:   Wire,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := policy.NewReadOverWrite(smoothing.ThesisAlpha, 500, 250)
			if err != nil {
				t.Fatal(err)
			}
			shared := Shared(tc.consumers)
			states := make([]policy.State, len(tc.consumers))
			var set []netip.Addr
			for range 10 {
				set = set[:0]
				for i, c := range tc.consumers {
					r, _ := Choose(c, shared, tc.device[c.Device], tc.wire)
					if pol.Update(&states[i], topology.Consumer{Addr: c.Addr, Device: c.Device}, r.WriteKBs) {
						set = append(set, c.Addr)
					}
				}
			}
			if !slices.Equal(set, tc.want) {
				t.Errorf("throttleable set %v, want %v", set, tc.want)
			}
			if _, src := Choose(tc.consumers[0], shared, tc.device[tc.consumers[0].Device], tc.wire); src != tc.wantSrc {
				t.Errorf("reader's rate from %s, want %s", src, tc.wantSrc)
			}
		})
	}
}

func TestShared(t *testing.T) {
	tests := []struct {
		name string
		cs   []Consumer
		want map[string]bool
	}{
		{"own devices", []Consumer{{reader, "a"}, {w1, "b"}}, map[string]bool{}},
		{"two clients, one device", []Consumer{{reader, "a"}, {w1, "a"}, {w2, "b"}}, map[string]bool{"a": true}},
		{"one client twice is not sharing", []Consumer{{reader, "a"}, {reader, "a"}}, map[string]bool{}},
		{"no device is not a device", []Consumer{{reader, ""}, {w1, ""}}, map[string]bool{}},
	}
	for _, tc := range tests {
		if got := Shared(tc.cs); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var m Meter
	if r := m.Update(t0, map[netip.Addr]Counters{w1: {Sent: 1000, Received: 10}}); r == nil || len(r) != 0 {
		t.Errorf("first update: %v, want an empty map (counters run, nobody measured yet)", r)
	}
	r := m.Update(t0.Add(100*time.Millisecond), map[netip.Addr]Counters{
		w1:     {Sent: 1000 + 2048000, Received: 10 + 10240}, // 2000 KiB and 10 KiB in 100 ms
		reader: {Sent: 5, Received: 5},                       // new: no rate yet
	})
	want := map[netip.Addr]Rates{w1: {WriteKBs: 20000, ReadKBs: 100}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("rates %v, want %v", r, want)
	}
	r = m.Update(t0.Add(200*time.Millisecond), map[netip.Addr]Counters{w1: {Sent: 7}, reader: {Sent: 105, Received: 5}})
	// 100 B in 100 ms: 1000 B/s is 0.9765625 KiB/s, the unit of the
	// device rates it stands in for. w1's counters went back: skipped.
	want = map[netip.Addr]Rates{reader: {WriteKBs: 1000.0 / 1024}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("after a reset: %v, want %v", r, want)
	}
	if r := m.Update(t0.Add(200*time.Millisecond), nil); r == nil || len(r) != 0 {
		t.Errorf("no time passed: %v, want no rates", r)
	}
}
