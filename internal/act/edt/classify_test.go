//go:build linux

package edt

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
)

// loadC loads the embedded C classifier, or skips where BPF cannot load
// at all; a verifier refusal fails.
func loadC(t *testing.T) objects {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF needs root")
	}
	o, err := load()
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			t.Skipf("this kernel refuses BPF: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(o.close)
	return o
}

// packet is an Ethernet frame of a TCP segment from the target's port
// sport to dst (IPv4 or IPv6 by dst) with payload bytes of data.
func packet(dst netip.Addr, sport uint16, payload int) []byte {
	var p, tcp []byte
	if dst.Is4() {
		p = make([]byte, 14+20+20+payload)
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		ip := p[14:]
		ip[0], ip[8], ip[9] = 0x45, 64, 6
		binary.BigEndian.PutUint16(ip[2:], uint16(20+20+payload))
		a := dst.As4()
		copy(ip[16:], a[:])
		tcp = ip[20:]
	} else {
		p = make([]byte, 14+40+20+payload)
		binary.BigEndian.PutUint16(p[12:], 0x86dd)
		ip := p[14:]
		ip[0], ip[6], ip[7] = 0x60, 6, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(20+payload))
		a := dst.As16()
		copy(ip[24:], a[:])
		tcp = ip[40:]
	}
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], 40000)
	tcp[12], tcp[13] = 5<<4, 0x10 // 20-byte header, ACK
	return p
}

// classify runs the classifier once on pkt (BPF_PROG_TEST_RUN) and
// returns the departure time it gave (0: none) and the clock around it.
func classify(t *testing.T, prog *ebpf.Program, pkt []byte) (ts, before, after uint64) {
	t.Helper()
	in, out := make([]byte, skbSize), make([]byte, skbSize)
	before = monotonic()
	ret, err := prog.Run(&ebpf.RunOptions{Data: pkt, Context: in, ContextOut: out})
	after = monotonic()
	if err != nil {
		t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
	}
	if ret != 0 {
		t.Errorf("verdict %d, want TC_ACT_OK (0): the classifier must pass every packet", ret)
	}
	return binary.LittleEndian.Uint64(out[skbTstamp:]), before, after
}

// TestClassifierInKernel runs the C classifier in this kernel (no fq
// needed: BPF_PROG_TEST_RUN returns the departure time it wrote) on
// IPv4 and IPv6 segments: a throttled initiator's segments from its
// port in its direction (by the port's small-segment split) get now +
// delay and are counted delayed, its others from that port pass and are
// counted passed, its segments from another port and other addresses
// are not touched, a lowered delay never gives an earlier time than the
// last, and an expired entry passes everything.
func TestClassifierInKernel(t *testing.T) {
	o := loadC(t)
	e := &EDT{objects: o}
	ms := uint64(time.Millisecond)
	for _, c := range []struct {
		name string
		addr netip.Addr
	}{{"IPv4", netip.MustParseAddr("192.0.2.7")}, {"IPv6", netip.MustParseAddr("2001:db8::7")}} {
		t.Run(c.name, func(t *testing.T) {
			k := Key{c.addr, 3260}
			if err := e.SetEntry(c.addr, 3260, Entry{Split: 128, Dir: Write, Delay: 5 * time.Millisecond}, time.Hour); err != nil {
				t.Fatal(err)
			}
			var last uint64
			for _, n := range []int{0, 48, 128} { // pure ACK, R2T, the split
				ts, before, after := classify(t, o.prog, packet(c.addr, 3260, n))
				if ts < before+5*ms || ts > after+5*ms {
					t.Errorf("a %d-byte segment left at %d, want now + 5 ms in [%d, %d]", n, ts, before+5*ms, after+5*ms)
				}
				last = ts
			}
			// Not delayed in the write direction of a 128-byte split, but
			// not before the last delayed one either (fq would let a
			// packet without a time overtake it).
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 129)); ts != last {
				t.Errorf("a 129-byte segment got departure time %d, want the last delayed one's %d and no delay of its own", ts, last)
			}
			time.Sleep(6 * time.Millisecond)
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 129)); ts != 0 {
				t.Errorf("a 129-byte segment got departure time %d once the delayed ones had left, want none", ts)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 22, 0)); ts != 0 {
				t.Errorf("a segment from port 22 got departure time %d, want none (not a throttled port)", ts)
			}
			got, err := e.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if got[k] != (Counters{Delayed: 3, Passed: 2}) || len(got) != 1 {
				t.Errorf("counters %+v, want 3 delayed and 2 passed on port 3260 only", got)
			}

			// Read: data held, ACKs passed.
			if err := e.SetEntry(c.addr, 3260, Entry{Split: 128, Dir: Read, Delay: 20 * time.Millisecond}, time.Hour); err != nil {
				t.Fatal(err)
			}
			ts20, before, after := classify(t, o.prog, packet(c.addr, 3260, 1448))
			if ts20 < before+20*ms || ts20 > after+20*ms {
				t.Errorf("a data segment left at %d, want now + 20 ms in [%d, %d]", ts20, before+20*ms, after+20*ms)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 0)); ts != ts20 {
				t.Errorf("a pure ACK got departure time %d in the read direction, want no delay of its own but not before the data's %d", ts, ts20)
			}
			// Lowered to 1 ms: no earlier than the last (order).
			if err := e.SetEntry(c.addr, 3260, Entry{Split: 128, Dir: Both, Delay: time.Millisecond}, time.Hour); err != nil {
				t.Fatal(err)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 1448)); ts < ts20 {
				t.Errorf("after lowering the delay a segment left at %d, before the last one's %d: reordered", ts, ts20)
			}
			// Expired: passed, as after a daemon's death.
			if err := e.SetEntry(c.addr, 3260, Entry{Split: 128, Dir: Both, Delay: 20 * time.Millisecond}, time.Microsecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 1448)); ts != 0 {
				t.Errorf("an expired entry still gave departure time %d", ts)
			}
			got, _ = e.Counters()
			if want := (Counters{Delayed: 5, Passed: 4}); got[k] != want {
				t.Errorf("counters %+v, want %+v", got[k], want)
			}
			if err := e.Free(c.addr, 3260); err != nil {
				t.Fatal(err)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 3260, 0)); ts != 0 {
				t.Errorf("a freed initiator's segment got departure time %d", ts)
			}
		})
	}
	// Another address: untouched and not counted.
	if ts, _, _ := classify(t, o.prog, packet(netip.MustParseAddr("192.0.2.8"), 3260, 0)); ts != 0 {
		t.Errorf("an address without an entry got departure time %d", ts)
	}
	tot, err := e.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Counters{Delayed: 10, Passed: 8}); tot != want {
		t.Errorf("totals %+v after freeing both, want %+v (freed entries' counts kept)", tot, want)
	}
	if per, _ := e.Counters(); len(per) != 0 {
		t.Errorf("counters left after Free: %v", per)
	}
}

// withInitiatorPort sets the initiator's port (the TCP destination
// port) of pkt, a frame made by packet.
func withInitiatorPort(pkt []byte, iport uint16) []byte {
	l4 := 14 + 20
	if binary.BigEndian.Uint16(pkt[12:]) == 0x86dd {
		l4 = 14 + 40
	}
	binary.BigEndian.PutUint16(pkt[l4+2:], iport)
	return pkt
}

// connections counts the connections the classifier keeps an order for.
func connections(t *testing.T, o objects) int {
	t.Helper()
	var k, v []byte
	n := 0
	it := o.conn.Iterate()
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestClassifierOrderPerConnection: order is kept per TCP connection,
// as fq keeps its flows: a connection's undelayed segment (here read
// data, with only writes held) leaves no earlier than that connection's
// held ACK, while another connection of the same initiator and port
// (NFS's several, iSCSI's multipath) is not held behind it; once the
// held ones have left, the classifier forgets the connection.
func TestClassifierOrderPerConnection(t *testing.T) {
	o := loadC(t)
	e := &EDT{objects: o}
	ms := uint64(time.Millisecond)
	for _, addr := range []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")} {
		t.Run(addr.String(), func(t *testing.T) {
			if err := e.SetEntry(addr, 3260, Entry{Split: 128, Dir: Write, Delay: 5 * time.Millisecond}, time.Hour); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Free(addr, 3260) })
			a, b := uint16(40000), uint16(40001)
			ack, before, _ := classify(t, o.prog, withInitiatorPort(packet(addr, 3260, 0), a))
			if ack < before+5*ms {
				t.Fatalf("connection A's pure ACK left at %d, want now + 5 ms (after %d)", ack, before+5*ms)
			}
			if ts, _, _ := classify(t, o.prog, withInitiatorPort(packet(addr, 3260, 1448), b)); ts != 0 {
				t.Errorf("connection B's read data got departure time %d: held behind connection A's ACK (%d), want none", ts, ack)
			}
			if ts, _, _ := classify(t, o.prog, withInitiatorPort(packet(addr, 3260, 1448), a)); ts != ack {
				t.Errorf("connection A's read data got departure time %d, want its own held ACK's %d (no delay of its own, no overtaking)", ts, ack)
			}
			if n := connections(t, o); n != 1 {
				t.Errorf("%d connections kept for order with one holding packets, want 1", n)
			}
			time.Sleep(6 * time.Millisecond)
			if ts, _, _ := classify(t, o.prog, withInitiatorPort(packet(addr, 3260, 1448), a)); ts != 0 {
				t.Errorf("connection A's read data got departure time %d once its ACK had left, want none", ts)
			}
			if n := connections(t, o); n != 0 {
				t.Errorf("%d connections kept for order with nothing held, want 0", n)
			}
		})
	}
}

// TestClassifierHeldLimit: the classifier gives at most HeldLimit
// packets a departure time still ahead; past it a packet passes at once
// (no departure time: fq, which drops past its limit, sends it), whether
// it would be delayed or held for order, and is counted bypassed and
// passed; once the held packets have left, packets are delayed again.
func TestClassifierHeldLimit(t *testing.T) {
	o := loadC(t)
	e := &EDT{objects: o}
	a := netip.MustParseAddr("192.0.2.12")
	const delay = 250 * time.Millisecond
	if err := e.SetEntry(a, 3260, Entry{Split: 128, Dir: Write, Delay: delay}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ack := packet(a, 3260, 0)
	start := time.Now()
	out := make([]byte, skbSize)
	if _, err := o.prog.Run(&ebpf.RunOptions{Data: ack, Context: make([]byte, skbSize), ContextOut: out, Repeat: HeldLimit - 1}); err != nil {
		t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
	}
	if binary.LittleEndian.Uint64(out[skbTstamp:]) == 0 {
		t.Fatal("the filling ACKs got no departure time")
	}
	if ts, _, _ := classify(t, o.prog, ack); ts == 0 {
		t.Errorf("packet %d got no departure time, want the limit's last held", HeldLimit)
	}
	over := []struct {
		what string
		pkt  []byte
	}{
		{"an ACK to be delayed", ack},
		{"read data of the held connection, held for order", packet(a, 3260, 1448)},
	}
	for _, c := range over {
		if ts, _, _ := classify(t, o.prog, c.pkt); ts != 0 {
			t.Errorf("past %d held packets %s got departure time %d, want none (passed at once)", HeldLimit, c.what, ts)
		}
	}
	if el := time.Since(start); el > delay-50*time.Millisecond {
		t.Skipf("filling took %v, close to the %v the held packets stay: too loaded to tell", el, delay)
	}
	got, err := e.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Counters{Delayed: HeldLimit, Passed: 2, Bypassed: 2}); got[Key{a, 3260}] != want {
		t.Errorf("counters %+v, want %+v", got[Key{a, 3260}], want)
	}
	// The held ones have left; the count, 270 slots behind, must catch up
	// at once, not a few slots a packet.
	time.Sleep(delay + 20*time.Millisecond)
	if ts, before, _ := classify(t, o.prog, ack); ts < before+uint64(delay) {
		t.Errorf("once the held packets had left an ACK got departure time %d, want now + %v (after %d)", ts, delay, before+uint64(delay))
	}
}

// TestClassifierPortSplits: each port has its own split and its own
// entry (NFS's 256 bytes beside iSCSI's 128), as nfqueue's per-port
// split; a UDP datagram to the initiator is never touched.
func TestClassifierPortSplits(t *testing.T) {
	o := loadC(t)
	e := &EDT{objects: o}
	a := netip.MustParseAddr("192.0.2.10")
	if err := e.SetEntry(a, 3260, Entry{Split: 128, Dir: Write, Delay: 5 * time.Millisecond}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := e.SetEntry(a, 2049, Entry{Split: 256, Dir: Write, Delay: 9 * time.Millisecond}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ms := uint64(time.Millisecond)
	if ts, before, _ := classify(t, o.prog, packet(a, 2049, 200)); ts < before+9*ms {
		t.Errorf("a 200-byte NFS reply left at %d, want its port's 9 ms (after %d): under NFS's 256-byte split it clocks writes", ts, before+9*ms)
	}
	if ts, _, _ := classify(t, o.prog, packet(a, 3260, 200)); ts != 0 {
		t.Errorf("a 200-byte iSCSI segment got departure time %d: over iSCSI's 128-byte split it is read data", ts)
	}
	udp := packet(a, 2049, 0)
	udp[14+9] = 17
	if ts, _, _ := classify(t, o.prog, udp); ts != 0 {
		t.Errorf("a UDP datagram got departure time %d", ts)
	}
}

// TestClassifierMappedKey: an IPv4 address given IPv4-mapped is the same
// initiator as its 4-byte form.
func TestClassifierMappedKey(t *testing.T) {
	o := loadC(t)
	e := &EDT{objects: o}
	if err := e.SetEntry(netip.MustParseAddr("::ffff:192.0.2.9"), 3260, Entry{Split: 128, Dir: Write, Delay: 5 * time.Millisecond}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ts, before, _ := classify(t, o.prog, packet(netip.MustParseAddr("192.0.2.9"), 3260, 0)); ts < before+uint64(5*time.Millisecond) {
		t.Errorf("the IPv4 segment to a mapped entry left at %d, want after %d", ts, before+uint64(5*time.Millisecond))
	}
}

// BenchmarkClassifier times the classifier per packet in this kernel
// (BPF_PROG_TEST_RUN's own clock, which includes building the skb): a
// delayed segment of a throttled initiator, and one to an address
// without an entry (every other packet of the host while someone is
// throttled).
func BenchmarkClassifier(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("loading BPF needs root")
	}
	o, err := load()
	if err != nil {
		b.Skip(err)
	}
	defer o.close()
	e := &EDT{objects: o}
	a := netip.MustParseAddr("192.0.2.7")
	if err := e.SetEntry(a, 3260, Entry{Split: 128, Dir: Write, Delay: time.Millisecond}, time.Hour); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		pkt  []byte
	}{{"delayed", packet(a, 3260, 0)}, {"other", packet(netip.MustParseAddr("192.0.2.8"), 3260, 0)}} {
		b.Run(c.name, func(b *testing.B) {
			before, _ := e.Totals()
			_, per, err := o.prog.Benchmark(c.pkt, b.N, nil)
			if err != nil {
				b.Skip(err)
			}
			after, _ := e.Totals()
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
			// Past HeldLimit the benchmark would time the bypass.
			b.ReportMetric(float64(after.Bypassed-before.Bypassed)/float64(b.N), "bypassed/pkt")
		})
	}
}
