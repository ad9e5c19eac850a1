package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// fakeEngine returns scripted decisions, one per Step; the last repeats.
type fakeEngine struct {
	mu        sync.Mutex
	decisions []Decision
	steps     int
	topos     []topology.Topology
}

func (e *fakeEngine) SetTopology(t topology.Topology) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.topos = append(e.topos, t)
}

func (e *fakeEngine) Step(time.Time, []diskstats.Stat) Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	i := min(e.steps, len(e.decisions)-1)
	e.steps++
	if i < 0 {
		return Decision{}
	}
	return e.decisions[i]
}

func (e *fakeEngine) topologies() []topology.Topology {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]topology.Topology(nil), e.topos...)
}

// fakeStats fails for the reads whose index is in fail.
type fakeStats struct {
	reads int
	fail  map[int]bool
}

func (s *fakeStats) Read() ([]diskstats.Stat, []diskstats.LineError, error) {
	i := s.reads
	s.reads++
	if s.fail[i] {
		return nil, nil, errors.New("open /proc/diskstats: no such file")
	}
	return []diskstats.Stat{{Device: "loop1", Fields: 20}}, nil, nil
}

// fakeBackend records applies; the first failN applies fail.
type fakeBackend struct {
	mu      sync.Mutex
	applied []throttle.State
	calls   int
	failN   int
	closed  int
	// refuse, when set, is returned (as *throttle.Refused) by every Apply
	// that otherwise succeeds: the backend applied the rest.
	refuse string
}

func (b *fakeBackend) Name() string { return "fake" }
func (b *fakeBackend) Apply(_ context.Context, s throttle.State) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.calls <= b.failN {
		return errors.New("ipset add sanqos-fs-lab: operation not permitted")
	}
	b.applied = append(b.applied, cloneState(s))
	if b.refuse != "" {
		return &throttle.Refused{Reasons: []string{b.refuse}}
	}
	return nil
}
func (b *fakeBackend) Stats() throttle.Stats {
	return throttle.Stats{PacketsHeld: 7, PacketsPassed: 6, Backlog: 1, DelayErrorP50: 50 * time.Microsecond}
}
func (b *fakeBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed++
	return nil
}
func (b *fakeBackend) counts() (calls, ok, closed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls, len(b.applied), b.closed
}

// fakeDiscoverer returns scripted results, one per call; the last repeats.
type fakeDiscoverer struct {
	mu         sync.Mutex
	results    []discResult
	calls      int
	unresolved []string
}

type discResult struct {
	topo       topology.Topology
	err        error
	unresolved []string // backing stores this discovery left out
}

func (f *fakeDiscoverer) Discover(context.Context) (topology.Topology, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.results[min(f.calls, len(f.results)-1)]
	f.calls++
	f.unresolved = r.unresolved
	return r.topo, r.err
}

func (f *fakeDiscoverer) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func (f *fakeDiscoverer) Unresolved() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unresolved
}

// logBuf collects slog text output from several goroutines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count returns how many log lines contain all of subs.
func (l *logBuf) count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

func newLogger(l *logBuf) *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// eventually polls cond for up to 5 s, calling step between polls.
func eventually(t *testing.T, what string, step func(), cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		step()
		time.Sleep(time.Millisecond)
	}
}
