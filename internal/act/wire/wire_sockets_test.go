package wire

import (
	"net/netip"
	"testing"

	"github.com/sanqos/sanqos/internal/observe/attribution"
)

// socketCounts keeps each client's counters growing across connections
// that close: with their final counters before, after or without a dump
// that saw them, and counts a connection opened and closed between two
// reads whole.
func TestSocketCounts(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	// Data in full segments: 1000 bytes each (the split is 128).
	sock := func(cookie uint64, peer netip.Addr, sent, recv uint64) socketSample {
		return socketSample{cookie: cookie, local: 3260, peer: peer, bytesIn: sent * 1000, bytesOut: recv * 1000,
			segsIn: uint32(sent), segsOut: uint32(recv)}
	}
	// k is a number of full segments' bytes.
	k := func(n uint64) uint64 { return n * 1000 }
	type step struct {
		dump    []socketSample
		pending []socketSample // destroyed since the last read
		want    map[netip.Addr]attribution.Counters
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"open connections are summed per client", []step{
			{dump: []socketSample{sock(1, a, 10, 100), sock(2, a, 5, 50), sock(3, b, 1, 0)},
				want: map[netip.Addr]attribution.Counters{a: {Sent: k(15), Received: k(150)}, b: {Sent: k(1)}}},
		}},
		{"final counters of a socket seen before", []step{
			{dump: []socketSample{sock(1, a, 10, 100)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(10), Received: k(100)}}},
			{pending: []socketSample{sock(1, a, 30, 300)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(30), Received: k(300)}}},
			{want: map[netip.Addr]attribution.Counters{a: {Sent: k(30), Received: k(300)}}},
		}},
		{"final counters after the socket left the dumps", []step{
			{dump: []socketSample{sock(1, a, 10, 100)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(10), Received: k(100)}}},
			{want: map[netip.Addr]attribution.Counters{a: {Sent: k(10), Received: k(100)}}},
			{pending: []socketSample{sock(1, a, 30, 300)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(30), Received: k(300)}}},
		}},
		{"destroyed just after the dump that saw it", []step{
			{dump: []socketSample{sock(1, a, 10, 100)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(10), Received: k(100)}}},
			{dump: []socketSample{sock(1, a, 20, 200)}, pending: []socketSample{sock(1, a, 25, 250)},
				want: map[netip.Addr]attribution.Counters{a: {Sent: k(25), Received: k(250)}}},
		}},
		{"missed by one read, back in the next", []step{
			{dump: []socketSample{sock(1, a, 10, 0)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(10)}}},
			{want: map[netip.Addr]attribution.Counters{a: {Sent: k(10)}}},
			{dump: []socketSample{sock(1, a, 15, 0)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(15)}}},
		}},
		{"opened and closed between two reads", []step{
			{dump: []socketSample{sock(1, a, 10, 0)}, want: map[netip.Addr]attribution.Counters{a: {Sent: k(10)}}},
			{dump: []socketSample{sock(1, a, 10, 0)}, pending: []socketSample{sock(7, a, 1000, 4)},
				want: map[netip.Addr]attribution.Counters{a: {Sent: k(1010), Received: k(4)}}},
		}},
		{"other sockets do not count", []step{
			{dump: []socketSample{{cookie: 1, local: 22, peer: a, bytesIn: 9000, segsIn: 9}, sock(2, netip.MustParseAddr("10.0.0.9"), 9, 9)},
				want: map[netip.Addr]attribution.Counters{}},
		}},
		{"a reader's requests and a writer's responses are not data", []step{
			// 100 requests of 48 bytes in, 100 replies of 64 KiB out.
			{dump: []socketSample{{cookie: 1, local: 3260, peer: a, bytesIn: 4800, segsIn: 100, bytesOut: 100 << 16, segsOut: 100 * 45}},
				want: map[netip.Addr]attribution.Counters{a: {Received: 100 << 16}}},
			// Then it writes: 10 writes of 64 KiB with their commands.
			{dump: []socketSample{{cookie: 1, local: 3260, peer: a, bytesIn: 4800 + 10*(48+1<<16), segsIn: 100 + 10*46, bytesOut: 100<<16 + 480, segsOut: 100*45 + 10}},
				want: map[netip.Addr]attribution.Counters{a: {Sent: 10 * (48 + 1<<16), Received: 100 << 16}}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sc socketCounts
			counted := func(s socketSample) bool { return s.local == 3260 && (s.peer == a || s.peer == b) }
			for i, st := range c.steps {
				sc.pending = st.pending
				got := sc.update(st.dump, counted, func(uint16) int { return 128 })
				if len(got) != len(st.want) {
					t.Fatalf("read %d: %v, want %v", i, got, st.want)
				}
				for k, v := range st.want {
					if got[k] != v {
						t.Fatalf("read %d: %v, want %v", i, got, st.want)
					}
				}
			}
		})
	}
}
