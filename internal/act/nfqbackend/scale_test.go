package nfqbackend

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/packetpath"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// manyConsumers returns n distinct consumer addresses, 10.64.0.1 up.
func manyConsumers(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, byte(64 + (i+1)>>16), byte((i + 1) >> 8), byte(i + 1)})
	}
	return out
}

// scaleCase is a backend on a fake kernel, queue and clock with n
// throttled consumers in one group, each with flowsPer flows whose ramps
// and acknowledgment numbers the delayer remembers. No packet thread
// runs: the backend's commands run on the caller, which measures their
// cost alone.
func scaleCase(tb testing.TB, n, flowsPer int) (*Nfqueue, *fakeClock, plan.State) {
	tb.Helper()
	b, clk, _ := newFakePath(tb, NfqueueConfig{Instance: "qscale"}, "/nonexistent")
	k := owned.NewFakeKernel()
	b.rec = owned.NewOwnedReconciler(k, k, "qscale", 0)
	b.ended.Store(true)
	b.closed = false
	s := plan.State{Groups: []plan.Group{{Name: "pool", Members: manyConsumers(n), WriteDelay: 20 * ms}}}
	if err := b.Apply(context.Background(), s); err != nil {
		tb.Fatal(err)
	}
	now := clk.Now()
	id := uint32(0)
	for _, a := range s.Groups[0].Members {
		for f := range flowsPer {
			id++
			fk := packetpath.FlowKey{Dst: a, Sport: 3260, Dport: uint16(40000 + f)}
			b.del.Submit(id, fk, direction.Write, id, 20*ms, now)
			b.del.Submit(id, fk, direction.Read, id, 20*ms, now)
		}
		b.del.ReleaseAll()
	}
	return b, clk, s
}

// BenchmarkApplyManyConsumers: 10,000 throttled consumers with traffic,
// the controller changing their delay at every apply (its every tick
// while the resource is over its threshold). An apply must stay well
// under the 100 ms tick and far under HealthyWithin; "tick-ns" is the
// backend's share of a tick: the apply plus the counters the daemon
// reads each tick.
func BenchmarkApplyManyConsumers(b *testing.B) {
	const n, flowsPer = 10000, 3
	be, clk, s := scaleCase(b, n, flowsPer)
	ctx := context.Background()
	var applyTotal, tickTotal time.Duration
	b.ResetTimer()
	for i := range b.N {
		s.Groups[0].WriteDelay = time.Duration(10+i%20) * ms
		clk.Advance(100 * ms)
		start := time.Now()
		if err := be.Apply(ctx, s); err != nil {
			b.Fatal(err)
		}
		applied := time.Now()
		_ = be.Stats()
		applyTotal += applied.Sub(start)
		tickTotal += time.Since(start)
	}
	b.StopTimer()
	// A member leaving and another joining: the rarer apply that
	// rebuilds what is kept by consumer.
	var churn time.Duration
	const churns = 5
	members := s.Groups[0].Members
	for i := range churns {
		s.Groups[0].Members = append(slices.Clone(members[1:]), netip.AddrFrom4([4]byte{10, 99, 0, byte(i + 1)}))
		clk.Advance(100 * ms)
		start := time.Now()
		if err := be.Apply(ctx, s); err != nil {
			b.Fatal(err)
		}
		churn += time.Since(start)
	}
	b.ReportMetric(float64(churn.Nanoseconds())/churns, "churn-ns/apply")
	b.ReportMetric(float64(applyTotal.Nanoseconds())/float64(b.N), "ns/apply")
	b.ReportMetric(float64(tickTotal.Nanoseconds())/float64(b.N), "tick-ns")
	b.ReportMetric(n, "consumers")
	b.ReportMetric(float64(be.del.RiseStats().Flows), "flows")
}

// TestApplyManyConsumersFast (audit N6): with 10,000 throttled consumers
// whose flows the delayer remembers, an apply that changes only the
// delay costs far less than a tick. It used to walk every remembered
// flow against every member (seconds). The bound is loose for a loaded
// machine; BenchmarkApplyManyConsumers measures.
func TestApplyManyConsumersFast(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 10,000 consumers")
	}
	be, clk, s := scaleCase(t, 10000, 3)
	worst := time.Duration(0)
	for i := range 5 {
		s.Groups[0].WriteDelay = time.Duration(11+i) * ms
		clk.Advance(100 * ms)
		start := time.Now()
		if err := be.Apply(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
		if got := be.table.Load().of(s.Groups[0].Members[9999]).write; got != s.Groups[0].WriteDelay {
			t.Fatalf("consumer 9999 has write delay %v after the apply, want %v", got, s.Groups[0].WriteDelay)
		}
	}
	if worst > 50*ms {
		t.Fatalf("an apply of a new delay to 10,000 consumers took %v, want well under a tick", worst)
	}
	t.Logf("slowest of 5 applies: %v", worst)
}
