package nfqbackend

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// The packet path on a fake queue and clock: deterministic, without root.
// What only the kernel can show (real-time wake-ups, CPU stalls, TCP's
// reaction) stays in the live tests.

const ms = time.Millisecond

var t0 = time.Unix(1000, 0)

func flow(port uint16) packetpath.FlowKey {
	return packetpath.FlowKey{Dst: ip("10.0.0.2"), Sport: 3260, Dport: port}
}

// TestPacketLoopHoldsEachPacketItsDelay: the packet thread gives each
// packet its verdict exactly at arrival + the delay of its direction
// (the fake clock has no wake-up latency, so any error is the loop's),
// accepts at once, in the round it came, what needs no delay, and keeps a
// flow's order when a later packet has the shorter delay.
func TestPacketLoopHoldsEachPacketItsDelay(t *testing.T) {
	b, _, q := newFakePath(t, NfqueueConfig{NoRiseLimit: true}, "/nonexistent")
	b.table.Store(tableOf(delays{ip("10.0.0.2"): {write: 5 * ms, read: 12 * ms}}))
	small, big := 48, 1000
	q.packet(1*ms, 1, acttest.TCPPacket(small, 3260, 40001), 52+small)
	q.packet(2*ms, 2, acttest.TCPPacket(big, 3260, 40001), 52+big)
	q.packet(3*ms, 3, acttest.TCPPacket(0, 3260, 40002), 52)                                            // pure ACK: passes (AckDelay off)
	q.packet(3500*time.Microsecond, 4, to(acttest.TCPPacket(small, 3260, 40003), "10.0.0.9"), 52+small) // not throttled
	q.packet(4*ms, 5, acttest.TCPPacket(small, 3260, 40002), 52+small)
	q.packet(4500*time.Microsecond, 6, acttest.TCPPacket(small, 3260, 40001), 52+small) // behind 2 in its flow
	stop := runThread(t, b, b.loop, b.loopDone)
	waitFor(t, "six verdicts", func() bool { return len(q.given()) == 6 })
	stop()
	want := []verdict{{3, t0.Add(3 * ms)}, {4, t0.Add(3500 * time.Microsecond)}, {1, t0.Add(6 * ms)}, {5, t0.Add(9 * ms)}, {2, t0.Add(14 * ms)}, {6, t0.Add(14 * ms)}}
	if got := q.given(); !slices.Equal(got, want) {
		t.Errorf("verdicts (id, time after t0):\n got %v\nwant %v", since(got), since(want))
	}
	if late := b.stalls.wakes.max(); late != 0 {
		t.Errorf("the packet thread woke %v late on a clock without latency", late)
	}
	if s := b.Stats(); s.PacketsHeld != 4 || s.Bypassed != 0 || s.DelayErrorMax != 0 {
		t.Errorf("held %d, bypassed %d, worst delay error %v; want 4 held, none bypassed, no error", s.PacketsHeld, s.Bypassed, s.DelayErrorMax)
	}
}

// TestPacketLoopOverflowKeepsArrivalOrder: when a packet finds the
// backlog full, its flow's held packets leave at once, in order, before
// it; and a packet accepted at once earlier in the same round leaves
// before them, since it came first.
func TestPacketLoopOverflowKeepsArrivalOrder(t *testing.T) {
	b, _, q := newFakePath(t, NfqueueConfig{NoRiseLimit: true, MaxBacklog: 2}, "/nonexistent")
	b.table.Store(tableOf(delays{ip("10.0.0.2"): {write: 5 * ms, read: 5 * ms}}))
	q.packet(1*ms, 1, acttest.TCPPacket(48, 3260, 40001), 100)
	q.packet(1*ms, 2, acttest.TCPPacket(48, 3260, 40002), 100) // the backlog is full
	q.packet(2*ms, 3, to(acttest.TCPPacket(48, 3260, 40003), "10.0.0.9"), 100)
	q.packet(2*ms, 4, acttest.TCPPacket(48, 3260, 40001), 100) // overflows: 1, then 4
	stop := runThread(t, b, b.loop, b.loopDone)
	waitFor(t, "four verdicts", func() bool { return len(q.given()) == 4 })
	stop()
	want := []verdict{{3, t0.Add(2 * ms)}, {1, t0.Add(2 * ms)}, {4, t0.Add(2 * ms)}, {2, t0.Add(6 * ms)}}
	if got := q.given(); !slices.Equal(got, want) {
		t.Errorf("verdicts (id, time after t0):\n got %v\nwant %v", since(got), since(want))
	}
	if s := b.Stats(); s.Bypassed != 1 {
		t.Errorf("bypassed %d, want 1", s.Bypassed)
	}
}

// since renders verdicts with their times after t0.
func since(vs []verdict) []string {
	var out []string
	for _, v := range vs {
		out = append(out, fmt.Sprintf("%d@%v", v.id, v.at.Sub(t0)))
	}
	return out
}

// TestPacketLoopRiseLimit: a flow that meets a 20 ms delay ramps up to it
// through the packet loop at most as fast as DefaultRiseLimit allows, one
// step every second data packet (the read direction's RTT samples),
// while the same packets without the limit get 20 ms at once, side by
// side.
func TestPacketLoopRiseLimit(t *testing.T) {
	const n, target = 100, 20 * ms
	applied := map[bool][]time.Duration{}
	for _, limit := range []bool{false, true} {
		b, _, q := newFakePath(t, NfqueueConfig{NoRiseLimit: !limit}, "/nonexistent")
		b.table.Store(tableOf(delays{ip("10.0.0.2"): {write: target, read: target}}))
		for i := range n {
			q.packet(time.Duration(i+1)*ms, uint32(i+1), acttest.TCPPacket(1000, 3260, 40001), 52+1000)
		}
		stop := runThread(t, b, b.loop, b.loopDone)
		waitFor(t, "all verdicts", func() bool { return len(q.given()) == n })
		stop()
		for _, v := range q.given() {
			applied[limit] = append(applied[limit], v.at.Sub(t0.Add(time.Duration(v.id)*ms)))
		}
	}
	for i, d := range applied[false] {
		if d != target {
			t.Fatalf("without the limit packet %d got %v, want %v at once", i+1, d, target)
		}
	}
	got := applied[true]
	if got[0] != packetpath.DefaultRiseLimit.Step {
		t.Errorf("first packet got %v, want one step, %v", got[0], packetpath.DefaultRiseLimit.Step)
	}
	ramp := 0
	for i := 1; i < len(got); i++ {
		p, g := got[i-1], got[i]
		if lim := packetpath.DefaultRiseLimit.Next(p, target); g > lim || g < p {
			t.Fatalf("packet %d: %v after %v, want between %v and %v", i+1, g, p, p, lim)
		}
		if g < target {
			ramp = i + 1
		}
	}
	if got[n-1] != target {
		t.Fatalf("after %d packets the delay is %v, want %v", n, got[n-1], target)
	}
	t.Logf("0 → %v in %d packets (limited), 1 packet (unlimited)", target, ramp+1)
	if ramp < 40 {
		t.Errorf("the ramp took %d packets; a read-direction ramp to %v takes about 60", ramp, target)
	}
}

// standbyCase holds three packets (due at 5.5, 6.5 and 7.5 ms, between
// the standby's looks, which come every millisecond) while the packet
// thread is away (it never runs here); the caller runs the standby alone,
// with the packet CPU's receive backlog at backlog.
func standbyCase(t *testing.T, backlog int) (*Nfqueue, *fakeClock, *fakeQueue, string) {
	proc := t.TempDir()
	fakeProc(t, proc, 1, backlog)
	b, clk, q := newFakePath(t, NfqueueConfig{NoRiseLimit: true}, proc)
	for i := range 3 {
		b.del.Submit(uint32(i+1), flow(1), direction.Write, 0, 5*ms, t0.Add(time.Duration(i)*ms+ms/2))
	}
	b.active.Store(true)
	return b, clk, q, proc
}

// TestStandbyTakesOverAStalledPacketThread: with held packets due and the
// packet thread away, the standby releases them 1–2 ms after they fell
// due (a look every millisecond, then one of grace: see standbyGrace for
// why no later), and hands the path back when asked.
func TestStandbyTakesOverAStalledPacketThread(t *testing.T) {
	b, _, q, _ := standbyCase(t, 0)
	stop := runThread(t, b, b.standby, b.standbyDone)
	waitFor(t, "three verdicts", func() bool { return len(q.given()) == 3 })
	b.back.Store(true)
	waitFor(t, "the standby to hand the path back", func() bool {
		if b.path.TryLock() {
			b.path.Unlock()
			return true
		}
		return false
	})
	stop()
	for _, v := range q.given() {
		due := t0.Add(time.Duration(v.id-1)*ms + 5*ms + ms/2)
		if late := v.at.Sub(due); late < 0 || late > 2*ms {
			t.Errorf("packet %d released %v after it fell due, want 0 to 2ms", v.id, late)
		}
	}
	if ids := []uint32{q.given()[0].id, q.given()[1].id, q.given()[2].id}; !slices.Equal(ids, []uint32{1, 2, 3}) {
		t.Errorf("released %v, want 1 2 3 in order", ids)
	}
	if n := b.stalls.takeovers.n; n != 1 {
		t.Errorf("%d takeovers, want 1", n)
	}
}

// TestStandbyLeavesALivePacketThread: while the packet thread goes round
// its loop (its beat moves between two looks), the standby does not take
// the path, even with work due.
func TestStandbyLeavesALivePacketThread(t *testing.T) {
	b, clk, q, _ := standbyCase(t, 0)
	clk.onSleep = func(time.Time) { b.beat.Add(1) }
	stop := runThread(t, b, b.standby, b.standbyDone)
	waitFor(t, "50 ms of fake time", func() bool { return clk.Now().Sub(t0) >= 50*ms })
	stop()
	if v := q.given(); len(v) != 0 || b.stalls.takeovers.n != 0 {
		t.Errorf("the standby took over a live packet thread: %d takeovers, verdicts %v", b.stalls.takeovers.n, since(v))
	}
}

// TestStandbyWaitsForThePacketCPUsBacklog: while the stalled packet CPU's
// receive backlog holds packets it released, the standby declines to take
// over (its releases could overtake them); it takes over at its first
// look once the backlog is empty.
func TestStandbyWaitsForThePacketCPUsBacklog(t *testing.T) {
	b, clk, q, proc := standbyCase(t, 3)
	const empties = 30 * ms
	emptied := false
	clk.onSleep = func(now time.Time) {
		if !emptied && now.Sub(t0) >= empties {
			fakeProc(t, proc, 1, 0)
			emptied = true
		}
	}
	stop := runThread(t, b, b.standby, b.standbyDone)
	waitFor(t, "three verdicts", func() bool { return len(q.given()) == 3 })
	b.back.Store(true)
	stop()
	first := q.given()[0].at.Sub(t0)
	if first < empties || first > empties+standbyTick {
		t.Errorf("first release at %v, want at the first look after the backlog emptied at %v", first, empties)
	}
	// The work fell due at 5.5 ms, the 6 ms look saw it, and its grace
	// ended at 7 ms: every look from then until the backlog emptied
	// declined.
	if n, want := b.declined.Load(), uint64((empties-7*ms)/standbyTick); n != want {
		t.Errorf("%d takeovers declined, want %d", n, want)
	}
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
