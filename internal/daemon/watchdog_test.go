package daemon

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/serve/sdnotify"
)

// healthBackend is a fake backend whose packet path can be made unhealthy.
type healthBackend struct {
	*fakeBackend
	mu  sync.Mutex
	err error
}

func (b *healthBackend) Healthy(time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// fakeSystemd is a notify socket that collects datagrams.
type fakeSystemd struct {
	c    *net.UnixConn
	path string
}

func newFakeSystemd(t *testing.T) *fakeSystemd {
	t.Helper()
	p := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &fakeSystemd{c: c, path: p}
}

// drain returns the datagrams received so far.
func (f *fakeSystemd) drain() []string {
	var out []string
	buf := make([]byte, 512)
	for {
		f.c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := f.c.Read(buf)
		if err != nil {
			return out
		}
		out = append(out, string(buf[:n]))
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Finding 5 of issue 14: the unit had no watchdog, so a stuck daemon
// (SIGSTOP: 3 s RTT) was never restarted. The watchdog is fed only while
// the loop ticks and the backend's packet path is healthy.
func TestWatchdogFedOnlyWhileAlive(t *testing.T) {
	sd := newFakeSystemd(t)
	n := sdnotify.New(sd.path, 3*time.Second)
	be := &healthBackend{fakeBackend: &fakeBackend{}}
	logs := &logBuf{}
	clk := clock.NewFake(t0)
	d, err := New(Options{Clock: clk, Decider: &fakeEngine{decisions: []Decision{dec(5, 0)}}, Stats: &fakeStats{},
		Backend: be, Logger: newLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	d.feedWatchdog(n, now)
	if got := sd.drain(); len(got) != 0 {
		t.Fatalf("before the first tick: %q, want nothing (not ready, not alive)", got)
	}
	now = now.Add(100 * time.Millisecond)
	d.tick(context.Background(), now)
	d.feedWatchdog(n, now.Add(50*time.Millisecond))
	if got := sd.drain(); !equal(got, []string{"READY=1", "WATCHDOG=1"}) {
		t.Fatalf("after the first tick: %q, want READY=1 then WATCHDOG=1", got)
	}
	// The loop stops ticking (SIGSTOP, a deadlock): no more feeding.
	d.feedWatchdog(n, now.Add(tickStaleAfter+time.Millisecond))
	if got := sd.drain(); len(got) != 0 {
		t.Fatalf("with the loop stuck: %q, want nothing", got)
	}
	if logs.count("not feeding the systemd watchdog", "no tick for") != 1 {
		t.Errorf("stuck loop not logged:\n%s", logs)
	}
	// Ticking again, but the packet path is dead.
	now = now.Add(tickStaleAfter + 100*time.Millisecond)
	d.tick(context.Background(), now)
	be.mu.Lock()
	be.err = errors.New("packet thread silent for 2s")
	be.mu.Unlock()
	d.feedWatchdog(n, now)
	if got := sd.drain(); len(got) != 0 {
		t.Fatalf("with the backend unhealthy: %q, want nothing", got)
	}
	be.mu.Lock()
	be.err = nil
	be.mu.Unlock()
	d.feedWatchdog(n, now)
	if got := sd.drain(); !equal(got, []string{"WATCHDOG=1"}) {
		t.Fatalf("healthy again: %q, want WATCHDOG=1", got)
	}

	// The loop goroutine says STOPPING=1 when its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Watchdog(ctx, n); close(done) }()
	cancel()
	<-done
	if got := sd.drain(); len(got) == 0 || got[len(got)-1] != "STOPPING=1" {
		t.Errorf("on stop: %q, want STOPPING=1 last", got)
	}
}
