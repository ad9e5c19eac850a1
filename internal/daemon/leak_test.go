package daemon

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// A long-running loop must not grow goroutines or descriptors (finding 12
// of issue 14): thousands of ticks on a fake clock, with the real
// diskstats reader, discovery every 5 s that alternates between two
// topologies, throttles engaging and releasing, a reload and failing
// applies on the way; the counts after must equal those after warm-up.
func TestLongRunDoesNotLeak(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "diskstats"), []byte("   7 1 loop1 100 0 800 50 10 0 80 5 0 60 55 0 0 0 0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stats := diskstats.NewFS(dir)
	defer stats.Close()
	topoA := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", Consumers: []topology.Consumer{{Device: "loop1"}}}}}
	topoB := topology.Topology{Resources: []topology.Resource{{Name: "fs-b"}}}
	disc := &fakeDiscoverer{results: []discResult{{topo: topoA}, {topo: topoB}}}
	eng := &fakeEngine{}
	for i := range 40 { // engage and release, with changing members
		if i%4 == 3 {
			eng.decisions = append(eng.decisions, dec(5, 0))
		} else {
			eng.decisions = append(eng.decisions, dec(20, float64(i%7+1), "10.99.0.3", []string{"10.99.0.4", "10.99.0.5"}[i%2]))
		}
	}
	be := &fakeBackend{failN: 50}
	clk := clock.NewFake(t0)
	logs := &logBuf{}
	d, err := New(Options{Clock: clk, Decider: eng, Stats: stats, Backend: be, Discoverer: disc, Logger: newLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	ticks := func() uint64 { return d.Status().Ticks }
	step := func(n int) {
		for range n {
			want := ticks() + 1
			deadline := time.Now().Add(5 * time.Second)
			for ticks() < want {
				clk.Advance(100 * time.Millisecond)
				if time.Now().After(deadline) {
					t.Fatalf("tick %d did not happen", want)
				}
				runtime.Gosched()
			}
		}
	}
	step(200)
	runtime.GC()
	g0, f0 := runtime.NumGoroutine(), openFDs(t)
	step(2000)
	d.Reload(Reload{Decider: eng})
	step(3000)
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	g1, f1 := runtime.NumGoroutine(), openFDs(t)
	if g1 > g0 || f1 > f0 {
		t.Errorf("after 5000 more ticks: %d goroutines (was %d), %d descriptors (was %d)", g1, g0, f1, f0)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if disc.calls < 100 {
		t.Errorf("discovery ran %d times, want at least 100 (every 5 s of 520 s or more)", disc.calls)
	}
	t.Logf("goroutines %d → %d, descriptors %d → %d over 5000 ticks; discovery %d times", g0, g1, f0, f1, disc.calls)
}
