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

// packet is an Ethernet frame to dst whose IP total length is total
// (IPv4 or IPv6 by dst), the rest zero.
func packet(dst netip.Addr, total int) []byte {
	if dst.Is4() {
		p := make([]byte, 14+total)
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		ip := p[14:]
		ip[0], ip[8], ip[9] = 0x45, 64, 6
		binary.BigEndian.PutUint16(ip[2:], uint16(total))
		a := dst.As4()
		copy(ip[16:], a[:])
		return p
	}
	p := make([]byte, 14+total)
	binary.BigEndian.PutUint16(p[12:], 0x86dd)
	ip := p[14:]
	ip[0], ip[6], ip[7] = 0x60, 6, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(total-40))
	a := dst.As16()
	copy(ip[24:], a[:])
	return p
}

// skbSize is struct __sk_buff's size on recent kernels; tstamp is at
// skbTstamp (UAPI).
const (
	skbSize   = 192
	skbTstamp = 152
)

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
// IPv4 and IPv6 packets: a throttled initiator's packets of its
// direction get now + delay and are counted delayed, its others pass and
// are counted passed, another address is not touched, a lowered delay
// never gives an earlier time than the last, and an expired entry
// passes everything.
func TestClassifierInKernel(t *testing.T) {
	o := loadC(t)
	e := &EDT{m: o.m, cnt: o.cnt}
	ms := uint64(time.Millisecond)
	for _, c := range []struct {
		name string
		addr netip.Addr
	}{{"IPv4", netip.MustParseAddr("192.0.2.7")}, {"IPv6", netip.MustParseAddr("2001:db8::7")}} {
		t.Run(c.name, func(t *testing.T) {
			if err := e.Set(c.addr, Write, 5*time.Millisecond, time.Hour); err != nil {
				t.Fatal(err)
			}
			ack := packet(c.addr, 52+20*btoi(c.addr.Is6()))
			ts, before, after := classify(t, o.prog, ack)
			if ts < before+5*ms || ts > after+5*ms {
				t.Errorf("a pure ACK left at %d, want now + 5 ms in [%d, %d]", ts, before+5*ms, after+5*ms)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 1500)); ts != 0 {
				t.Errorf("a data segment got departure time %d in the write direction, want none", ts)
			}
			got, err := e.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if got[c.addr] != (Counters{Delayed: 1, Passed: 1}) {
				t.Errorf("counters %+v, want 1 delayed and 1 passed", got[c.addr])
			}

			// Read: data held, ACKs passed.
			if err := e.Set(c.addr, Read, 20*time.Millisecond, time.Hour); err != nil {
				t.Fatal(err)
			}
			ts20, before, after := classify(t, o.prog, packet(c.addr, 1500))
			if ts20 < before+20*ms || ts20 > after+20*ms {
				t.Errorf("a data segment left at %d, want now + 20 ms in [%d, %d]", ts20, before+20*ms, after+20*ms)
			}
			if ts, _, _ := classify(t, o.prog, ack); ts != 0 {
				t.Errorf("a pure ACK got departure time %d in the read direction, want none", ts)
			}
			// Lowered to 1 ms: no earlier than the last (order).
			if err := e.Set(c.addr, Both, time.Millisecond, time.Hour); err != nil {
				t.Fatal(err)
			}
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 1500)); ts < ts20 {
				t.Errorf("after lowering the delay a packet left at %d, before the last one's %d: reordered", ts, ts20)
			}
			// Expired: passed, as after a daemon's death.
			if err := e.Set(c.addr, Both, 20*time.Millisecond, time.Microsecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
			if ts, _, _ := classify(t, o.prog, packet(c.addr, 1500)); ts != 0 {
				t.Errorf("an expired entry still gave departure time %d", ts)
			}
			got, _ = e.Counters()
			if want := (Counters{Delayed: 3, Passed: 3}); got[c.addr] != want {
				t.Errorf("counters %+v, want %+v", got[c.addr], want)
			}
			if err := e.Free(c.addr); err != nil {
				t.Fatal(err)
			}
			if ts, _, _ := classify(t, o.prog, ack); ts != 0 {
				t.Errorf("a freed initiator's packet got departure time %d", ts)
			}
		})
	}
	// Another address: untouched and not counted.
	other := netip.MustParseAddr("192.0.2.8")
	if ts, _, _ := classify(t, o.prog, packet(other, 52)); ts != 0 {
		t.Errorf("an address without an entry got departure time %d", ts)
	}
	tot, err := e.Totals()
	if err != nil {
		t.Fatal(err)
	}
	if want := (Counters{Delayed: 6, Passed: 6}); tot != want {
		t.Errorf("totals %+v after freeing both, want %+v (freed entries' counts kept)", tot, want)
	}
	if per, _ := e.Counters(); len(per) != 0 {
		t.Errorf("counters left after Free: %v", per)
	}
}

// TestClassifierMappedKey: an IPv4 address given IPv4-mapped is the same
// initiator as its 4-byte form.
func TestClassifierMappedKey(t *testing.T) {
	o := loadC(t)
	e := &EDT{m: o.m, cnt: o.cnt}
	if err := e.Set(netip.MustParseAddr("::ffff:192.0.2.9"), Write, 5*time.Millisecond, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ts, before, _ := classify(t, o.prog, packet(netip.MustParseAddr("192.0.2.9"), 52)); ts < before+uint64(5*time.Millisecond) {
		t.Errorf("the IPv4 packet to a mapped entry left at %d, want after %d", ts, before+uint64(5*time.Millisecond))
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
