package throttle

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
)

type releaseLog struct {
	mu  sync.Mutex
	ids []uint32
}

func (l *releaseLog) add(ids []uint32) {
	l.mu.Lock()
	l.ids = append(l.ids, ids...)
	l.mu.Unlock()
}

var t0 = time.Unix(1000, 0)

func flow(port uint16) flowKey { return flowKey{dst: ip("10.0.0.2"), sport: 3260, dport: port} }

// TestDelayerLoweringDelayKeepsFlowOrder: after the delay drops from 20 ms
// to 0, new packets of the flow wait behind the held ones instead of
// overtaking them; another flow is not held up.
func TestDelayerLoweringDelayKeepsFlowOrder(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	now := t0
	for id := uint32(1); id <= 3; id++ {
		if d.Submit(id, flow(1), 20*time.Millisecond, now) {
			t.Fatalf("packet %d accepted at once under 20ms delay", id)
		}
		now = now.Add(time.Millisecond)
	}
	if d.Submit(4, flow(1), 0, now) {
		t.Fatal("packet 4 (delay now 0) was accepted at once and would overtake 1-3")
	}
	if !d.Submit(5, flow(2), 0, now) {
		t.Fatal("an undelayed packet of another flow was held")
	}
	if n := d.ReleaseDue(t0.Add(19 * time.Millisecond)); n != 0 {
		t.Fatalf("released %d packets before their time", n)
	}
	d.ReleaseDue(t0.Add(22 * time.Millisecond))
	if want := []uint32{1, 2, 3, 4}; !slices.Equal(log.ids, want) {
		t.Fatalf("released %v, want %v in order", log.ids, want)
	}
	if !d.Submit(6, flow(1), 0, now) {
		t.Fatal("flow drained but its undelayed packet was still held")
	}
}

// TestDelayerReleaseTimes: each packet leaves at arrival + its delay.
func TestDelayerReleaseTimes(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	d.Submit(1, flow(1), 5*time.Millisecond, t0)
	d.Submit(2, flow(2), 1*time.Millisecond, t0)
	d.Submit(3, flow(3), 3*time.Millisecond, t0)
	for _, c := range []struct {
		at   time.Duration
		want []uint32
	}{{999 * time.Microsecond, nil}, {time.Millisecond, []uint32{2}}, {3 * time.Millisecond, []uint32{2, 3}}, {5 * time.Millisecond, []uint32{2, 3, 1}}} {
		d.ReleaseDue(t0.Add(c.at))
		if !slices.Equal(log.ids, c.want) {
			t.Fatalf("at %v released %v, want %v", c.at, log.ids, c.want)
		}
	}
}

// TestDelayerBacklogFailsOpen: beyond the backlog limit packets pass.
func TestDelayerBacklogFailsOpen(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 2, func([]uint32) {})
	d.Submit(1, flow(1), time.Millisecond, t0)
	d.Submit(2, flow(2), time.Millisecond, t0)
	if !d.Submit(3, flow(3), time.Millisecond, t0) {
		t.Fatal("packet over the backlog limit was held")
	}
	if s := d.Stats(); s.Bypassed != 1 || s.Backlog != 2 || s.PacketsHeld != 2 {
		t.Fatalf("stats %+v, want 1 bypassed, backlog 2, 2 held", s)
	}
}

// TestDelayerRunWithFakeClock: the release loop sleeps on the clock and
// releases everything when stopped.
func TestDelayerRunWithFakeClock(t *testing.T) {
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 100, log.add)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	d.Submit(1, flow(1), 2*time.Millisecond, t0)
	d.Submit(2, flow(2), 50*time.Millisecond, t0)
	deadline := time.Now().Add(5 * time.Second)
	for {
		clk.Advance(time.Millisecond)
		log.mu.Lock()
		n := len(log.ids)
		log.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("packet 1 not released by the run loop")
		}
		time.Sleep(time.Millisecond)
	}
	if clk.Now().Sub(t0) < 2*time.Millisecond {
		t.Fatalf("released at %v, before its 2ms delay", clk.Now().Sub(t0))
	}
	cancel()
	<-done
	if !slices.Equal(log.ids, []uint32{1, 2}) {
		t.Fatalf("after stop released %v, want [1 2] (fail open on exit)", log.ids)
	}
}

func tcpPacket(payload int, sport, dport uint16) []byte {
	p := make([]byte, 20+32)
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(20+32+payload))
	p[9] = 6
	copy(p[16:20], []byte{10, 0, 0, 2})
	binary.BigEndian.PutUint16(p[20:22], sport)
	binary.BigEndian.PutUint16(p[22:24], dport)
	p[32] = 8 << 4 // 32-byte TCP header (timestamps)
	return p
}

func TestParseIPv4TCP(t *testing.T) {
	for _, c := range []struct {
		name    string
		pkt     []byte
		total   int
		payload int
		ok      bool
	}{
		{"pure ack", tcpPacket(0, 3260, 40000), 0, 0, true},
		{"r2t", tcpPacket(48, 3260, 40000), 0, 48, true},
		{"gso super-packet, truncated copy", tcpPacket(0, 3260, 40000), 20 + 32 + 65000, 65000, true},
		{"udp", func() []byte { p := tcpPacket(0, 1, 2); p[9] = 17; return p }(), 0, 0, false},
		{"ipv6", func() []byte { p := tcpPacket(0, 1, 2); p[0] = 0x60; return p }(), 0, 0, false},
		{"short", tcpPacket(0, 1, 2)[:30], 0, 0, false},
	} {
		p, ok := parseIPv4TCP(c.pkt, c.total)
		if ok != c.ok || (ok && (p.payload != c.payload || p.flow != flow(40000))) {
			t.Errorf("%s: got %+v %v, want payload %d ok %v", c.name, p, ok, c.payload, c.ok)
		}
	}
}

// BenchmarkDelayer measures the delayer's capacity on one core: each
// iteration holds one packet and releases it.
func BenchmarkDelayer(b *testing.B) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 1<<20, func([]uint32) {})
	now := t0
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Microsecond)
		d.Submit(uint32(i), flowKey{dst: ip("10.0.0.2"), sport: 3260, dport: uint16(i % 64)}, time.Millisecond, now)
		if i%64 == 0 {
			d.ReleaseDue(now)
		}
	}
	d.ReleaseDue(now.Add(time.Second))
}

func TestDirectionOfSegment(t *testing.T) {
	d := dirDelays{write: 3 * time.Millisecond, read: 7 * time.Millisecond}
	for _, c := range []struct {
		payload int
		want    time.Duration
	}{{0, d.write}, {48, d.write}, {48 + 80, d.write}, {129, d.read}, {1448, d.read}, {65000, d.read}} {
		if got := d.of(c.payload, DefaultSmallSegment); got != c.want {
			t.Errorf("payload %d: delay %v, want %v", c.payload, got, c.want)
		}
	}
}
