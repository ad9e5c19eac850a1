package engine

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// benchWorld builds a topology of nRes resources of perRes devices each and
// nSnap diskstats texts whose counters grow tick by tick (the benchmark
// cycles through them; the wrap back to the first looks like a counter
// wrap, which is a valid tick too).
func benchWorld(nRes, perRes, nSnap int) (topology.Topology, [][]byte) {
	var topo topology.Topology
	for r := 0; r < nRes; r++ {
		res := topology.Resource{Name: fmt.Sprintf("res%d", r)}
		for i := 0; i < perRes; i++ {
			n := r*perRes + i
			res.Consumers = append(res.Consumers, topology.Consumer{
				Addr:   netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}),
				Device: fmt.Sprintf("dm-%d", n),
			})
		}
		topo.Resources = append(topo.Resources, res)
	}
	devs := nRes * perRes
	snaps := make([][]byte, nSnap)
	for s := range snaps {
		var b strings.Builder
		for n := 0; n < devs; n++ {
			k := uint64(s + 1)
			reads := k * uint64(10+n%7)
			fmt.Fprintf(&b, "%4d %7d dm-%d %d 0 %d %d %d 0 %d %d 0 %d %d 0 0 0 0 0 0\n",
				253, n, n, reads, reads*16, reads*uint64(5+n%40),
				k*20, k*20*128, k*40, k*50, k*60)
		}
		snaps[s] = []byte(b.String())
	}
	return topo, snaps
}

// BenchmarkTick is one full tick at scale: parse a 10,000-device
// /proc/diskstats text and Step 1,000 resources of 10 devices each.
func BenchmarkTick(b *testing.B) {
	topo, snaps := benchWorld(1000, 10, 8)
	e, err := New(DefaultConfig(), topo)
	if err != nil {
		b.Fatal(err)
	}
	var p diskstats.Parser
	var stats []diskstats.Stat
	now := time.Unix(0, 0)
	b.SetBytes(int64(len(snaps[0])))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		var bad []diskstats.LineError
		stats, bad = p.Parse(stats[:0], snaps[i%len(snaps)])
		if len(bad) != 0 {
			b.Fatal(bad[0])
		}
		now = now.Add(100 * time.Millisecond)
		dec := e.Step(now, stats)
		if len(dec.Resources) != 1000 {
			b.Fatal("lost resources")
		}
	}
	reportCPU(b, cpu0)
}

// BenchmarkParse10k and BenchmarkStep1k split BenchmarkTick in its parts.
func BenchmarkParse10k(b *testing.B) {
	_, snaps := benchWorld(1000, 10, 8)
	var p diskstats.Parser
	var stats []diskstats.Stat
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		stats, _ = p.Parse(stats[:0], snaps[i%len(snaps)])
	}
	reportCPU(b, cpu0)
}

func BenchmarkStep1k(b *testing.B) {
	topo, snaps := benchWorld(1000, 10, 8)
	e, err := New(DefaultConfig(), topo)
	if err != nil {
		b.Fatal(err)
	}
	var p diskstats.Parser
	parsed := make([][]diskstats.Stat, len(snaps))
	for i := range snaps {
		parsed[i], _ = p.Parse(nil, snaps[i])
	}
	now := time.Unix(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for i := 0; i < b.N; i++ {
		now = now.Add(100 * time.Millisecond)
		e.Step(now, parsed[i%len(parsed)])
	}
	reportCPU(b, cpu0)
}

// cpuTime is the process's user+system CPU time. The machine is shared
// and often loaded: wall-clock ns/op then mostly measures waiting for a
// core, while CPU ns/op measures the work.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// TestTickScale checks the benchmark's world is what it claims and that a
// tick at that scale decides for every resource, so the benchmark measures
// real work.
func TestTickScale(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 10,000-device world; skipped in -short runs")
	}
	topo, snaps := benchWorld(1000, 10, 2)
	e, err := New(DefaultConfig(), topo)
	if err != nil {
		t.Fatal(err)
	}
	var p diskstats.Parser
	s0, bad := p.Parse(nil, snaps[0])
	if len(bad) != 0 || len(s0) != 10000 {
		t.Fatalf("%d devices, %d bad lines", len(s0), len(bad))
	}
	e.Step(time.Unix(0, 0), s0)
	s1, _ := p.Parse(nil, snaps[1])
	dec := e.Step(time.Unix(0, int64(100*time.Millisecond)), s1)
	if dec.MissingDevices != 0 || len(dec.Consumers) != 10000 {
		t.Fatalf("missing %d, consumers %d", dec.MissingDevices, len(dec.Consumers))
	}
	for _, r := range dec.Resources {
		if r.Reads == 0 || r.RawMs == 0 {
			t.Fatalf("resource %s measured nothing: %+v", r.Name, r)
		}
	}
}
