//go:build linux

package qdisc

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"golang.org/x/sys/unix"
)

// monotonicNow is CLOCK_MONOTONIC in ns, the programs' clock.
func monotonicNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// The edt programs run in this kernel (BPF_PROG_TEST_RUN, no fq needed),
// held to the nfqueue backend's laws: the rise limit (RiseLimit, the Go
// code is the spec) and arming.

// loadEDT loads the edt programs, or skips where BPF cannot load at all;
// a verifier refusal fails.
func loadEDT(t *testing.T) *edt.EDT {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF needs root")
	}
	e, err := edt.Load()
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			t.Skipf("this kernel refuses BPF: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// targetOf is the target's address in a's family.
func targetOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.MustParseAddr("192.0.2.1")
	}
	return netip.MustParseAddr("2001:db8::1")
}

// frame is an Ethernet frame of a TCP segment from src:sport to dst:dport
// with acknowledgment number ack and payload bytes of data.
func frame(src, dst netip.Addr, sport, dport uint16, ack uint32, payload int) []byte {
	var p, tcp []byte
	if dst.Is4() {
		p = make([]byte, 14+20+20+payload)
		binary.BigEndian.PutUint16(p[12:], 0x0800)
		ip := p[14:]
		ip[0], ip[8], ip[9] = 0x45, 64, 6
		binary.BigEndian.PutUint16(ip[2:], uint16(20+20+payload))
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		tcp = ip[20:]
	} else {
		p = make([]byte, 14+40+20+payload)
		binary.BigEndian.PutUint16(p[12:], 0x86dd)
		ip := p[14:]
		ip[0], ip[6], ip[7] = 0x60, 6, 64
		binary.BigEndian.PutUint16(ip[4:], uint16(20+payload))
		s, d := src.As16(), dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		tcp = ip[40:]
	}
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12], tcp[13] = 5<<4, 0x10 // 20-byte header, ACK
	return p
}

// risePkt is one packet the target sends an initiator's flow: its
// acknowledgment number and payload, and the delay asked for it.
type risePkt struct {
	ack     uint32
	payload int
	delay   time.Duration
}

// ramp is n packets asking for delay, each with the acknowledgment
// number ackAt(i).
func ramp(n int, payload int, delay time.Duration, ackAt func(i int) uint32) []risePkt {
	out := make([]risePkt, n)
	for i := range out {
		out[i] = risePkt{ack: ackAt(i), payload: payload, delay: delay}
	}
	return out
}

// TestEDTRiseMatchesRiseLimit: the delay the BPF classifier applies to
// each packet of a flow equals what nfqueue's Delayer.LimitRise gives
// the same sequence, packet by packet: a rise steps only on an RTT
// sample (an advancing ACK number in the write direction, every second
// data packet in the read direction), lowering applies at once, and a
// new flow starts from 0; each departure time is now + that delay, never
// before the last. The program without the limit (the zero Rise) jumps
// at once, which the Go law does not: the comparison can fail.
func TestEDTRiseMatchesRiseLimit(t *testing.T) {
	e := loadEDT(t)
	const port, split = 3260, 128
	advancing := func(i int) uint32 { return uint32(1000 + 2896*i) }
	repeating := func(i int) uint32 { return uint32(1000 + 2896*(i/3)) } // every ACK number three times
	wrapping := func(i int) uint32 { return uint32(0xffff0000 + 2896*uint32(i)) }
	lowered := append(ramp(30, 0, 20*time.Millisecond, advancing), ramp(5, 0, 2*time.Millisecond, func(i int) uint32 { return advancing(30 + i) })...)
	lowered = append(lowered, ramp(10, 0, 20*time.Millisecond, func(i int) uint32 { return advancing(35 + i) })...)
	toZero := append(ramp(10, 0, 5*time.Millisecond, advancing), ramp(2, 0, 0, func(i int) uint32 { return advancing(10 + i) })...)
	toZero = append(toZero, ramp(5, 0, 5*time.Millisecond, func(i int) uint32 { return advancing(12 + i) })...)
	for _, c := range []struct {
		name string
		addr netip.Addr
		dir  direction.Direction
		pkts []risePkt
	}{
		{"write: every ACK advances", netip.MustParseAddr("192.0.2.7"), direction.Write, ramp(40, 0, 20*time.Millisecond, advancing)},
		{"write: repeated ACK numbers keep the delay", netip.MustParseAddr("192.0.2.8"), direction.Write, ramp(40, 0, 20*time.Millisecond, repeating)},
		{"write: small segments and wrapping ACK numbers", netip.MustParseAddr("2001:db8::8"), direction.Write, ramp(30, 48, 10*time.Millisecond, wrapping)},
		{"read: a step every second data packet", netip.MustParseAddr("192.0.2.9"), direction.Read, ramp(60, 1448, 20*time.Millisecond, func(int) uint32 { return 77 })},
		{"lowering applies at once, rising ramps again", netip.MustParseAddr("2001:db8::9"), direction.Write, lowered},
		{"lowered to 0 the flow is forgotten", netip.MustParseAddr("192.0.2.10"), direction.Write, toZero},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := packetpath.NewDelayer(nil, 1, nil)
			f := packetpath.FlowKey{Dst: c.addr.Unmap(), Sport: port, Dport: 40000}
			edir := edt.Write
			if c.dir == direction.Read {
				edir = edt.Read
			}
			var last uint64
			limited := 0
			for i, p := range c.pkts {
				// The daemon's renewal each packet: it must not reset
				// the program's ramp or order.
				en := edt.Entry{Split: split, Dir: edir, Delay: p.delay, Rise: edtRise(packetpath.DefaultRiseLimit)}
				if err := e.SetEntry(c.addr, port, en, time.Hour); err != nil {
					t.Fatal(err)
				}
				ts, err := e.Run(frame(targetOf(c.addr), c.addr, port, 40000, p.ack, p.payload), false)
				if err != nil {
					t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
				}
				now := time.Now()
				want := d.LimitRise(f, c.dir, p.ack, p.delay, now)
				if want < p.delay {
					limited++
				}
				got, _ := e.FlowDelay(c.addr, 40000, port, edir)
				if got != want {
					t.Fatalf("packet %d (ack %d, %d bytes, asked %v): the program applied %v, RiseLimit gives %v", i, p.ack, p.payload, p.delay, got, want)
				}
				if want > 0 && ts == 0 {
					t.Fatalf("packet %d: applied %v but no departure time", i, want)
				}
				if ts != 0 && ts < last {
					t.Fatalf("packet %d left at %d, before the last one's %d: reordered", i, ts, last)
				}
				last = max(last, ts)
			}
			cs, err := e.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if got := cs[edt.Key{Addr: c.addr.Unmap(), Port: port}].Limited; got != uint64(limited) {
				t.Errorf("counted %d packets limited, RiseLimit held %d below the asked delay", got, limited)
			}
			if limited == 0 {
				t.Error("no packet was Limited: the sequence tests nothing")
			}
			if err := e.Free(c.addr, port); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestEDTRiseNewFlowAndIdle: a flow of an initiator whose other flow has
// ramped to the full delay starts from 0 (its first packet gets one
// step), and a flow idle for 10 s starts again from 0 (non-short only:
// it waits the 10 s).
func TestEDTRiseNewFlowAndIdle(t *testing.T) {
	e := loadEDT(t)
	a := netip.MustParseAddr("192.0.2.11")
	const port = 3260
	en := edt.Entry{Split: 128, Dir: edt.Write, Delay: 3 * time.Millisecond, Rise: edtRise(packetpath.DefaultRiseLimit)}
	if err := e.SetEntry(a, port, en, time.Hour); err != nil {
		t.Fatal(err)
	}
	run := func(iport uint16, ack uint32) time.Duration {
		t.Helper()
		if _, err := e.Run(frame(targetOf(a), a, port, iport, ack, 0), false); err != nil {
			t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
		}
		d, _ := e.FlowDelay(a, iport, port, edt.Write)
		return d
	}
	var d time.Duration
	for i := range 30 {
		d = run(40000, uint32(100*(i+1)))
	}
	if d != 3*time.Millisecond {
		t.Fatalf("after 30 advancing ACKs the flow is at %v, want the full 3ms", d)
	}
	if got := run(40001, 100); got != packetpath.DefaultRiseLimit.Step {
		t.Errorf("a new flow's first packet got %v, want one step from 0 (%v)", got, packetpath.DefaultRiseLimit.Step)
	}
	if testing.Short() {
		t.Skip("the idle half waits 10 s")
	}
	time.Sleep(packetpath.RiseForget + 100*time.Millisecond)
	if got := run(40000, 100000); got != packetpath.DefaultRiseLimit.Step {
		t.Errorf("a flow idle for %v got %v, want one step from 0 (%v)", packetpath.RiseForget, got, packetpath.DefaultRiseLimit.Step)
	}
}

// TestEDTFreeForgetsRamps: freeing an initiator's entry forgets the
// ramps of its flows on that port (nfqueue forgets a member 3 s after it
// left), so delayed again it ramps from 0 instead of jumping back to the
// delay it had, against an RTT estimate that has fallen meanwhile; the
// ramps of its other port and of other initiators stay.
func TestEDTFreeForgetsRamps(t *testing.T) {
	e := loadEDT(t)
	a, b := netip.MustParseAddr("192.0.2.31"), netip.MustParseAddr("2001:db8::32")
	const port, other = 3260, 2049
	en := edt.Entry{Split: 128, Dir: edt.Write, Delay: 3 * time.Millisecond, Rise: edtRise(packetpath.DefaultRiseLimit)}
	ramp := func(x netip.Addr, p uint16) {
		t.Helper()
		if err := e.SetEntry(x, p, en, time.Hour); err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			if _, err := e.Run(frame(targetOf(x), x, p, 40000, uint32(100*(i+1)), 0), false); err != nil {
				t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
			}
		}
		if d, _ := e.FlowDelay(x, 40000, p, edt.Write); d != en.Delay {
			t.Fatalf("%s port %d: the flow ramped to %v, want %v", x, p, d, en.Delay)
		}
	}
	ramp(a, port)
	ramp(a, other)
	ramp(b, port)
	if err := e.Free(a, port); err != nil {
		t.Fatal(err)
	}
	if d, ok := e.FlowDelay(a, 40000, port, edt.Write); ok {
		t.Errorf("the freed entry's flow kept its ramp at %v", d)
	}
	for _, k := range []struct {
		x netip.Addr
		p uint16
	}{{a, other}, {b, port}} {
		if d, _ := e.FlowDelay(k.x, 40000, k.p, edt.Write); d != en.Delay {
			t.Errorf("%s port %d, not freed: ramp %v, want it kept at %v", k.x, k.p, d, en.Delay)
		}
	}
	if err := e.SetEntry(a, port, en, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(frame(targetOf(a), a, port, 40000, 10000, 0), false); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.FlowDelay(a, 40000, port, edt.Write); d != packetpath.DefaultRiseLimit.Step {
		t.Errorf("delayed again after its entry was freed: first packet at %v, want one step from 0 (%v)", d, packetpath.DefaultRiseLimit.Step)
	}
}

// TestEDTArmingInKernel: the ingress program activates an armed entry's
// write delay with the first segment longer than the split that the
// initiator sends the port, for a second (nfqueue's ipset timeout); a
// short segment, a long one to another port, or one from an initiator
// that is not armed activates nothing; the daemon's renewal of the entry
// does not end an activation; read data is not held by arming.
func TestEDTArmingInKernel(t *testing.T) {
	e := loadEDT(t)
	const port, split = 3260, 128
	armed, member := netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("2001:db8::21")
	arm := edt.Entry{Split: split, Armed: 4 * time.Millisecond}                                             // no rise limit: exact times
	own := edt.Entry{Split: split, Dir: edt.Read, Delay: 6 * time.Millisecond, Armed: 4 * time.Millisecond} // reads held, writes armed
	notArmed := edt.Entry{Split: split, Dir: edt.Read, Delay: 6 * time.Millisecond}
	other := netip.MustParseAddr("192.0.2.22")
	set := func() {
		t.Helper()
		for _, x := range []struct {
			a  netip.Addr
			en edt.Entry
		}{{armed, arm}, {member, own}, {other, notArmed}} {
			if err := e.SetEntry(x.a, port, x.en, time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	set()
	in := func(src netip.Addr, dport uint16, payload int) {
		t.Helper()
		if _, err := e.Run(frame(src, targetOf(src), 40000, dport, 1, payload), true); err != nil {
			t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
		}
	}
	held := func(dst netip.Addr, payload int) time.Duration {
		t.Helper()
		now := monotonicNow()
		ts, err := e.Run(frame(targetOf(dst), dst, port, 40000, 1, payload), false)
		if err != nil {
			t.Skipf("this kernel cannot test-run a classifier with a context: %v", err)
		}
		if ts == 0 {
			return 0
		}
		return time.Duration(ts - now).Round(time.Millisecond)
	}
	if d := held(armed, 0); d != 0 {
		t.Errorf("an armed initiator that has not written was held %v", d)
	}
	in(armed, port, split) // a request, not a write
	in(armed, 22, 1000)    // not a storage port
	in(other, port, 1000)  // not armed
	if d := held(armed, 0); d != 0 {
		t.Errorf("after a %d-byte segment and one to port 22 the armed initiator was held %v, want 0", split, d)
	}
	if d := held(other, 0); d != 0 {
		t.Errorf("an initiator that is not armed had its write direction held %v after writing", d)
	}
	in(armed, port, split+1)
	in(member, port, 1448)
	set() // the daemon's renewal must not end the activation
	if d := held(armed, 0); d != 4*time.Millisecond {
		t.Errorf("after its first write the armed initiator's ACK was held %v, want the armed 4ms", d)
	}
	time.Sleep(5 * time.Millisecond) // the ACK's departure Passed: nothing to keep order behind
	if d := held(armed, 1448); d != 0 {
		t.Errorf("arming held read data %v, want 0 (it holds writes)", d)
	}
	if d, r := held(member, 48), held(member, 1448); d != 4*time.Millisecond || r != 6*time.Millisecond {
		// (The read leaves 6 ms from now, after the 4 ms write: in order.)
		t.Errorf("a consumer with a read delay, armed: write %v read %v, want 4ms and 6ms", d, r)
	}
	time.Sleep(time.Second + 50*time.Millisecond)
	if d := held(armed, 0); d != 0 {
		t.Errorf("the activation did not expire after a second without a write: held %v", d)
	}
	in(armed, port, 1000)
	if d := held(armed, 0); d != 4*time.Millisecond {
		t.Errorf("a write after the expiry did not activate the arming again: held %v", d)
	}
	cs, _ := e.Counters()
	if c := cs[edt.Key{Addr: armed, Port: port}]; c.Delayed != 2 || c.Passed != 4 {
		t.Errorf("armed initiator's counters %+v, want 2 delayed and 4 passed", c)
	}
}
