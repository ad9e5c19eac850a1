package packetpath

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// TestDelayerFullBacklogKeepsFlowOrder (issue 14, finding 9): with the
// backlog full, a packet whose flow still has packets held must not be
// accepted ahead of them. Whatever the delayer lets go early, it lets go
// in the flow's order: every packet of the flow released (or accepted)
// before the new one, and none left behind it.
func TestDelayerFullBacklogKeepsFlowOrder(t *testing.T) {
	var log releaseLog
	d := NewDelayer(clock.NewFake(t0), 4, log.add)
	d.Rise = RiseLimit{}
	for id := uint32(1); id <= 3; id++ {
		if d.Submit(id, flow(1), direction.Write, id, 20*time.Millisecond, t0) {
			t.Fatalf("packet %d accepted at once under a 20ms delay", id)
		}
	}
	d.Submit(10, flow(2), direction.Write, 10, 20*time.Millisecond, t0) // fills the backlog
	if d.Submit(4, flow(1), direction.Write, 4, 20*time.Millisecond, t0) {
		log.add([]uint32{4}) // the caller accepts it now
	}
	d.ReleaseAll()
	var ours []uint32
	for _, id := range log.ids {
		if id != 10 {
			ours = append(ours, id)
		}
	}
	if want := []uint32{1, 2, 3, 4}; !slices.Equal(ours, want) {
		t.Fatalf("flow 1 left as %v, want %v: a packet overtook an earlier one of its flow", ours, want)
	}
	if s := d.Stats(); s.Bypassed == 0 {
		t.Fatalf("stats %+v: the overflow was not counted as bypassed", s)
	}
}

// TestDelayerHostileLoad: a flood of packets from thousands of flows (a
// throttled consumer opening connections as fast as it can) keeps the
// delayer's memory under its caps: the backlog at maxBacklog, the
// remembered ramps at MaxFlows, no flow ever reordered, and the heap
// measured before and after.
func TestDelayerHostileLoad(t *testing.T) {
	// With the rise limit delays start small and the ramps fill their
	// table; without it the backlog overflows at once.
	for _, rise := range []RiseLimit{DefaultRiseLimit, {}} {
		t.Run(fmt.Sprint(rise.Step), func(t *testing.T) { hostileLoad(t, rise) })
	}
}

func hostileLoad(t *testing.T, rise RiseLimit) {
	const flows, perFlow, backlog = MaxFlows + 5000, 3, 1024
	var log releaseLog
	clk := clock.NewFake(t0)
	d := NewDelayer(clk, backlog, log.add)
	d.Rise = rise
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	now := t0
	accepted := map[uint32]bool{}
	id := uint32(0)
	for r := 0; r < perFlow; r++ {
		for f := 0; f < flows; f++ {
			id++
			k := FlowKey{Dst: netip.AddrFrom4([4]byte{10, byte(f >> 16), byte(f >> 8), byte(f)}), Sport: 3260, Dport: uint16(1024 + f)}
			if d.Submit(id, k, direction.Read, id, 20*time.Millisecond, now) {
				log.add([]uint32{id})
				accepted[id] = true
			}
			if id%997 == 0 {
				now = now.Add(time.Millisecond)
				d.ReleaseDue(now)
			}
			if n := d.backlog(); n > HardBacklogFactor*backlog {
				t.Fatalf("backlog %d over its hard limit %d", n, HardBacklogFactor*backlog)
			}
		}
	}
	rs := d.RiseStats()
	if rs.Flows > MaxFlows {
		t.Fatalf("%d flow ramps remembered, cap %d", rs.Flows, MaxFlows)
	}
	if len(d.flows) > HardBacklogFactor*backlog || len(d.acks) > MaxFlows || len(d.cons) > MaxFlows {
		t.Fatalf("flow tables over their caps: flows %d, acks %d, seen %d", len(d.flows), len(d.acks), len(d.cons))
	}
	if rise != (RiseLimit{}) {
		// The tables are full: a new flow still gets its ramp.
		k := FlowKey{Dst: ip("192.0.2.1"), Sport: 3260, Dport: 9}
		d.Submit(id+1, k, direction.Read, 0, 20*time.Millisecond, now)
		if _, ok := d.rise[riseKey{k, direction.Read}]; !ok {
			t.Fatal("a new flow after the flood is not remembered: its delay would never ramp up")
		}
		d.ReleaseAll()
		log.ids = slices.DeleteFunc(log.ids, func(x uint32) bool { return x == id+1 })
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	d.ReleaseAll()
	// Order: the packets of one flow were submitted with ids growing by
	// `flows`; each flow's packets must leave in id order.
	last := map[uint32]uint32{}
	for _, id := range log.ids {
		f := (id - 1) % flows
		if p, ok := last[f]; ok && p > id {
			t.Fatalf("flow %d: packet %d left after %d", f, p, id)
		}
		last[f] = id
	}
	if len(log.ids) != flows*perFlow {
		t.Fatalf("%d packets left, want %d: some were lost", len(log.ids), flows*perFlow)
	}
	t.Logf("%d flows × %d packets, backlog cap %d: %d bypassed, %d ramps remembered (cap %d), heap %+d KiB",
		flows, perFlow, backlog, d.Stats().Bypassed, rs.Flows, MaxFlows, (int64(after.HeapAlloc)-int64(before.HeapAlloc))/1024)
}
