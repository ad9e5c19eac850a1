package packetpath

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// floodRun drives a delayer (backlog budget 100, no rise limit) for 2 s
// of fake time, and lets it release for 1.2 s more: an attacker at 10.0.0.66 throttled at 1 s with 300
// lockstep flows sending every 10 ms, and a victim at 10.0.0.2 throttled
// at 100 ms sending one packet every 50 ms. It returns the release time
// of every packet (at once: its arrival), the victim's ids and arrivals,
// and the verdict order.
type floodResult struct {
	d        *Delayer
	left     map[uint32]time.Time // id → when it was accepted
	order    []uint32             // verdicts in order
	flowOf   map[uint32]FlowKey
	victim   map[uint32]time.Time // id → arrival
	maxHeap  int
	attacker netip.Addr
	victimIP netip.Addr
}

func floodRun(t *testing.T) *floodResult {
	t.Helper()
	r := &floodResult{left: map[uint32]time.Time{}, flowOf: map[uint32]FlowKey{}, victim: map[uint32]time.Time{},
		attacker: ip("10.0.0.66"), victimIP: ip("10.0.0.2")}
	clk := clock.NewFake(t0)
	r.d = NewDelayer(clk, 100, func(ids []uint32) {
		for _, id := range ids {
			r.left[id] = clk.Now()
			r.order = append(r.order, id)
		}
	})
	r.d.Rise = RiseLimit{}
	id := uint32(0)
	submit := func(f FlowKey, delay time.Duration) uint32 {
		id++
		r.flowOf[id] = f
		if r.d.Submit(id, f, direction.Read, 0, delay, clk.Now()) {
			r.left[id] = clk.Now()
			r.order = append(r.order, id)
		}
		return id
	}
	for step := 0; step < 3200; step++ {
		if step < 2000 && step%10 == 0 {
			for p := range 300 {
				submit(FlowKey{Dst: r.attacker, Sport: 3265, Dport: uint16(20000 + p)}, time.Second)
			}
		}
		if step < 2000 && step%50 == 0 {
			r.victim[submit(FlowKey{Dst: r.victimIP, Sport: 3260, Dport: 40000}, 100*time.Millisecond)] = clk.Now()
		}
		r.maxHeap = max(r.maxHeap, r.d.backlog())
		clk.Advance(time.Millisecond)
		r.d.ReleaseDue(clk.Now())
	}
	return r
}

// TestDelayerFloodKeepsOthersHeld (audit N3): one consumer holding far
// more than the backlog loses the delay of its own packets only; another
// consumer's packets are all held their full delay, and no flow's
// packets are reordered.
func TestDelayerFloodKeepsOthersHeld(t *testing.T) {
	r := floodRun(t)
	short := 0
	for id, at := range r.victim {
		if got := r.left[id].Sub(at); got != 100*time.Millisecond {
			short++
			if short <= 3 {
				t.Errorf("victim packet %d held %v, want 100ms", id, got)
			}
		}
	}
	if short > 0 {
		t.Errorf("%d of %d victim packets not held their delay while the attacker flooded", short, len(r.victim))
	}
	last := map[FlowKey]uint32{}
	for _, id := range r.order {
		f := r.flowOf[id]
		if p, ok := last[f]; ok && p > id {
			t.Fatalf("flow %v: packet %d left after %d", f, p, id)
		}
		last[f] = id
	}
	if len(r.order) != len(r.flowOf) {
		t.Fatalf("%d verdicts for %d packets", len(r.order), len(r.flowOf))
	}
	if r.maxHeap > 2*100 {
		t.Errorf("backlog reached %d, over the hard limit 200", r.maxHeap)
	}
	if s := r.d.Stats(); s.Bypassed == 0 {
		t.Errorf("the attacker lost no delay although it held %d packets at most: %+v", r.maxHeap, s)
	}
}

// TestDelayerCountsBypassPerConsumer: the bypassed packets are the
// attacker's, counted against it; the victim has its delayed packets and
// no bypassed one; and the warning names the attacker.
func TestDelayerCountsBypassPerConsumer(t *testing.T) {
	r := floodRun(t)
	s := r.d.Stats()
	if len(s.Bypassers) != 1 || s.Bypassers[0].Addr != r.attacker || s.Bypassers[0].Bypassed != s.Bypassed {
		t.Fatalf("bypassers %+v, want only %v with all %d bypassed", s.Bypassers, r.attacker, s.Bypassed)
	}
	for _, c := range r.d.ConsumerStats() {
		switch c.Addr {
		case r.victimIP:
			if c.Bypassed != 0 || c.Delayed != uint64(len(r.victim)) {
				t.Errorf("victim %+v, want %d delayed, none bypassed", c, len(r.victim))
			}
		case r.attacker:
			if c.Delayed == 0 || c.Bypassed == 0 || c.Held != 0 {
				t.Errorf("attacker %+v, want some delayed, some bypassed, none held at the end", c)
			}
		}
	}
}

// TestDelayerHardLimit: consumers each under their share fill the
// backlog up to the hard limit, and past it everyone's packets pass,
// counted against each; the warning hook is told once.
func TestDelayerHardLimit(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 64, func([]uint32) {})
	d.Rise = RiseLimit{}
	var warned []ConsumerStats
	d.Warn = func(c ConsumerStats, backlog int, hard bool) {
		if !hard || backlog != 128 {
			t.Errorf("warning for %+v, backlog %d, hard %v; want the hard limit at 128", c, backlog, hard)
		}
		warned = append(warned, c)
	}
	id := uint32(0)
	// 16 consumers: a share of 64/16 = 4, but at least minShare (16).
	for round := range 20 {
		for c := range 16 {
			id++
			f := FlowKey{Dst: netip.AddrFrom4([4]byte{10, 1, 0, byte(c + 1)}), Sport: 3260, Dport: uint16(1000 + round)}
			if d.Submit(id, f, direction.Write, id, time.Second, t0) && d.backlog() < 128 {
				t.Fatalf("packet %d passed with backlog %d", id, d.backlog())
			}
		}
	}
	s := d.Stats()
	if s.Backlog != 128 || s.Bypassed != 20*16-128 || len(warned) != 1 {
		t.Fatalf("backlog %d, bypassed %d, %d warnings; want 128, %d, 1", s.Backlog, s.Bypassed, len(warned), 20*16-128)
	}
	if d.holding != 16 {
		t.Fatalf("%d consumers holding, want 16", d.holding)
	}
	d.ReleaseAll()
	if d.holding != 0 || d.Stats().Backlog != 0 {
		t.Fatalf("after releaseAll: %d consumers holding", d.holding)
	}
}

// TestDelayerLoneConsumerKeepsTheBudget: alone, a consumer holds the
// whole budget, as before isolation, and loses its delay beyond it; the
// warning names it.
func TestDelayerLoneConsumerKeepsTheBudget(t *testing.T) {
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, 32, func([]uint32) {})
	d.Rise = RiseLimit{}
	var warned []ConsumerStats
	d.Warn = func(c ConsumerStats, backlog int, hard bool) { warned = append(warned, c) }
	for id := uint32(1); id <= 40; id++ {
		d.Submit(id, flow(uint16(id)), direction.Write, id, time.Second, t0)
	}
	s := d.Stats()
	if s.Backlog != 32 || s.Bypassed != 8 || len(warned) != 1 || warned[0].Addr != ip("10.0.0.2") || warned[0].Held != 32 {
		t.Fatalf("backlog %d, bypassed %d, warnings %+v; want 32, 8, one for 10.0.0.2 holding 32", s.Backlog, s.Bypassed, warned)
	}
}

// TestDelayerForgetWhileHolding: Forget of a consumer that still holds
// packets forgets its flows' ramps (they restart from 0) but not its
// held packets, which leave on time and are counted out of its share; a
// consumer kept keeps its ramps.
func TestDelayerForgetWhileHolding(t *testing.T) {
	clk := clock.NewFake(t0)
	var log releaseLog
	d := NewDelayer(clk, 100, log.add)
	gone, kept := ip("10.0.0.2"), ip("10.0.0.3")
	fg := FlowKey{Dst: gone, Sport: 3260, Dport: 1}
	fk := FlowKey{Dst: kept, Sport: 3260, Dport: 1}
	now := t0
	for id := uint32(1); id <= 20; id += 2 {
		d.Submit(id, fg, direction.Read, 0, 10*time.Millisecond, now)
		d.Submit(id+1, fk, direction.Read, 0, 10*time.Millisecond, now)
		now = now.Add(100 * time.Microsecond)
	}
	rampOf := func(f FlowKey) time.Duration {
		d.mu.Lock()
		defer d.mu.Unlock()
		st, ok := d.rise[riseKey{f, direction.Read}]
		if !ok || !d.current(f.Dst, st.epoch) {
			return 0
		}
		return st.prev
	}
	before := rampOf(fk)
	if before == 0 || rampOf(fg) != before {
		t.Fatalf("ramps %v and %v before Forget, want equal and above 0", rampOf(fg), before)
	}
	d.Forget(func(a netip.Addr) bool { return a == kept })
	if rampOf(fg) != 0 || rampOf(fk) != before {
		t.Fatalf("after Forget ramps %v (forgotten) and %v (kept), want 0 and %v", rampOf(fg), rampOf(fk), before)
	}
	if d.holding != 2 || d.cons[gone] == nil || d.cons[gone].held != 10 {
		t.Fatalf("a forgotten consumer's held packets are no longer counted: holding %d", d.holding)
	}
	d.Submit(100, fg, direction.Read, 0, 10*time.Millisecond, now)
	if got := rampOf(fg); got != DefaultRiseLimit.Step {
		t.Fatalf("forgotten flow's next packet got %v, want a new ramp from 0 (%v)", got, DefaultRiseLimit.Step)
	}
	d.ReleaseDue(now.Add(time.Second))
	if len(log.ids) != 21 || d.holding != 0 || d.cons[gone].held != 0 {
		t.Fatalf("released %d of 21, %d consumers still holding", len(log.ids), d.holding)
	}
}

// BenchmarkDelayerBypassBusyFlow: the cost of one packet of a consumer
// over its share whose flow has packets held (they must leave first, in
// order), with the backlog at its budget of the nfqueue backend's
// default (throttle.DefaultMaxBacklog), and of
// the packet of another flow that takes the place it left: a flooder
// with busy flows keeps the backlog at its budget this way, one pair
// per packet released.
func BenchmarkDelayerBypassBusyFlow(b *testing.B) {
	const flows = 8192 // throttle.DefaultMaxBacklog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, flows, func([]uint32) {})
	d.Rise = RiseLimit{}
	hog := ip("10.0.0.66")
	victim := FlowKey{Dst: ip("10.0.0.2"), Sport: 3260, Dport: 1}
	id := uint32(0)
	fill := func() {
		d.ReleaseAll()
		for f := range flows {
			id++
			d.Submit(id, FlowKey{Dst: hog, Sport: 3260, Dport: uint16(f)}, direction.Read, 0, time.Second, t0)
		}
		id++
		d.Submit(id, victim, direction.Read, 0, time.Second, t0)
	}
	fill()
	next := 0
	b.ResetTimer()
	for range b.N {
		if next == flows {
			b.StopTimer()
			fill()
			next = 0
			b.StartTimer()
		}
		id++
		if !d.Submit(id, FlowKey{Dst: hog, Sport: 3260, Dport: uint16(next)}, direction.Read, 0, time.Second, t0) {
			b.Fatal("a packet of the consumer over its share was held")
		}
		// Its flow's packet left: one of another flow fills the place,
		// as when the backlog hovers at its budget.
		id++
		d.Submit(id, FlowKey{Dst: hog, Sport: 4000, Dport: uint16(next)}, direction.Read, 0, time.Second, t0)
		next++
	}
}

// TestDelayerTakenFlowsLeaveOnce: a consumer over its share whose busy
// flows are taken out again and again (more than compactAfter times):
// every packet leaves exactly once, in its flow's order, the backlog
// counts only the packets still held, and the heap's stale entries stay
// bounded.
func TestDelayerTakenFlowsLeaveOnce(t *testing.T) {
	clk := clock.NewFake(t0)
	var log releaseLog
	d := NewDelayer(clk, 64, log.add)
	d.Rise = RiseLimit{}
	hog, victim := ip("10.0.0.66"), FlowKey{Dst: ip("10.0.0.2"), Sport: 3260, Dport: 1}
	flowOf := map[uint32]FlowKey{}
	id := uint32(0)
	submit := func(f FlowKey, delay time.Duration, at time.Time) {
		id++
		flowOf[id] = f
		if d.Submit(id, f, direction.Read, 0, delay, at) {
			log.add([]uint32{id})
		}
	}
	now := t0
	for round := range 40 {
		for f := range 64 {
			submit(FlowKey{Dst: hog, Sport: 3260, Dport: uint16(f)}, time.Second, now)
		}
		submit(victim, 100*time.Millisecond, now)
		now = now.Add(10 * time.Millisecond)
		d.ReleaseDue(now)
		if n := d.backlog(); n > 2*64 || d.heap.Len() > 2*(n+compactAfter) {
			t.Fatalf("round %d: backlog %d, heap %d entries", round, n, d.heap.Len())
		}
	}
	if d.Stats().Bypassed < compactAfter {
		t.Fatalf("only %d bypassed: the flows were not taken out often enough", d.Stats().Bypassed)
	}
	d.ReleaseAll()
	seen := map[uint32]bool{}
	last := map[FlowKey]uint32{}
	for _, x := range log.ids {
		if seen[x] {
			t.Fatalf("packet %d left twice", x)
		}
		seen[x] = true
		if p, ok := last[flowOf[x]]; ok && p > x {
			t.Fatalf("flow %v: packet %d left after %d", flowOf[x], p, x)
		}
		last[flowOf[x]] = x
	}
	if len(seen) != int(id) || d.backlog() != 0 || d.holding != 0 {
		t.Fatalf("%d of %d packets left; backlog %d, %d consumers holding", len(seen), id, d.backlog(), d.holding)
	}
	for _, c := range d.ConsumerStats() {
		if c.Addr == victim.Dst && c.Bypassed != 0 {
			t.Errorf("the victim lost its delay: %+v", c)
		}
	}
}
