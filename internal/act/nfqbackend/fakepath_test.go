package nfqbackend

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sanqos/sanqos/internal/act/nfq"
	"github.com/sanqos/sanqos/internal/clock"
)

// fakeClock is the packet path's clock in unit tests: time moves only when
// a path thread sleeps or waits (see fakeQueue.wait), so a run is a
// deterministic sequence of events, whatever the machine's load.
type fakeClock struct {
	*clock.Fake
	// onSleep, when set before the path starts, runs on the sleeping
	// thread after each sleep, with the time it woke at.
	onSleep func(now time.Time)
	// parked counts the sleeps taken in the Go scheduler (Park).
	parked atomic.Int64
}

func (c *fakeClock) Sleep(d time.Duration) {
	c.Advance(d)
	if c.onSleep != nil {
		c.onSleep(c.Now())
	}
}

func (c *fakeClock) RawSleep(d time.Duration) { c.Sleep(d) }

func (c *fakeClock) Park(d time.Duration) {
	c.parked.Add(1)
	c.Sleep(d)
}

// arrival is a packet the fake queue delivers at a time, or (pkt nil) an
// action it runs then, on the path thread, such as a new delay table.
type arrival struct {
	at  time.Time
	pkt nfq.Packet
	do  func()
}

// verdict is an accepted packet and when the path accepted it.
type verdict struct {
	id uint32
	at time.Time
}

// fakeQueue is the NFQUEUE socket in unit tests. Its wait is the only
// place a path thread's clock moves while it waits: to the next arrival
// when that comes before the timeout, else by the whole timeout.
type fakeQueue struct {
	clk *fakeClock

	mu       sync.Mutex
	future   []arrival // in time order
	queued   []nfq.Packet
	verdicts []verdict
}

// packet schedules raw (an IP packet's headers, as the kernel copies
// them, of a packet whose full length is total) to arrive after the
// clock's start.
func (q *fakeQueue) packet(after time.Duration, id uint32, raw []byte, total int) {
	q.future = append(q.future, arrival{at: t0.Add(after), pkt: nfq.Packet{ID: id, Payload: raw, CapLen: uint32(total)}})
}

// action schedules do to run on the path thread after the clock's start.
func (q *fakeQueue) action(after time.Duration, do func()) {
	q.future = append(q.future, arrival{at: t0.Add(after), do: do})
}

// arrive moves what is due at now into the queue. q.mu held.
func (q *fakeQueue) arrive(now time.Time) {
	for len(q.future) > 0 && !q.future[0].at.After(now) {
		a := q.future[0]
		q.future = q.future[1:]
		if a.do != nil {
			a.do()
		} else {
			q.queued = append(q.queued, a.pkt)
		}
	}
}

func (q *fakeQueue) wait(d time.Duration) (int16, bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	end := q.clk.Now().Add(d)
	for {
		now := q.clk.Now()
		q.arrive(now)
		if len(q.queued) > 0 {
			return unix.POLLIN, false, nil
		}
		if len(q.future) == 0 || q.future[0].at.After(end) {
			q.clk.Advance(end.Sub(now))
			return 0, false, nil
		}
		q.clk.Advance(q.future[0].at.Sub(now))
	}
}

func (q *fakeQueue) Read(fn func(nfq.Packet)) (bool, error) {
	q.mu.Lock()
	got := q.queued
	q.queued = nil
	q.mu.Unlock()
	// Outside the lock: handling a packet may release others (a full
	// backlog), which calls Accept.
	for _, p := range got {
		fn(p)
	}
	return len(got) > 0, nil
}

func (q *fakeQueue) Accept(ids ...uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		q.verdicts = append(q.verdicts, verdict{id, q.clk.Now()})
	}
	return nil
}

func (q *fakeQueue) given() []verdict {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]verdict(nil), q.verdicts...)
}

func (q *fakeQueue) sockErrors() uint64 { return 0 }
func (q *fakeQueue) Close() error       { return nil }
func (q *fakeQueue) poller(int) poller  { return q }

// newFakePath returns a backend whose packet path runs on a fake queue
// and clock starting at t0, with the packet thread on CPU 1 and the
// standby on CPU 0, nothing placed, and /proc at proc. Its threads are
// not started.
func newFakePath(t testing.TB, cfg NfqueueConfig, proc string) (*Nfqueue, *fakeClock, *fakeQueue) {
	t.Helper()
	cfg.SmallSegment = DefaultSmallSegment
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	clk := &fakeClock{Fake: clock.NewFake(t0)}
	q := &fakeQueue{clk: clk}
	b := &Nfqueue{cfg: cfg, log: quietLog(), place: func(int, string, bool) func() { return func() {} }, cpu: 1, standbyCPU: 0,
		stop: make(chan struct{}), loopDone: make(chan struct{}), standbyDone: make(chan struct{})}
	var fds [2]int
	for i, flags := range []int{unix.EFD_NONBLOCK | unix.EFD_CLOEXEC, unix.EFD_CLOEXEC} {
		fd, err := unix.Eventfd(0, flags)
		if err != nil {
			t.Fatalf("creating an eventfd: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		fds[i] = fd
	}
	b.initPath(q, fds[0], fds[1], clk, proc)
	return b, clk, q
}

// runThread starts thread (b.loop or b.standby) and returns a stop that sets
// stopping and waits until done is closed.
func runThread(t *testing.T, b *Nfqueue, thread func(), done chan struct{}) (stop func()) {
	t.Helper()
	go thread()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			b.stopping.Store(true)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the path thread did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor waits (in real time, at most 10 s) until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// fakeProc writes a /proc root with a softnet_stat in which cpu has
// backlog packets waiting and the other CPUs none.
func fakeProc(t *testing.T, dir string, cpu, backlog int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	var s string
	for c := range 2 {
		q := 0
		if c == cpu {
			q = backlog
		}
		s += fmt.Sprintf("00000010 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 %08x %08x 00000000 00000000\n", q, c)
	}
	if err := os.WriteFile(filepath.Join(dir, softnetStat), []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// to returns raw with its destination address set to dst.
func to(raw []byte, dst string) []byte {
	copy(raw[16:20], ip(dst).AsSlice())
	return raw
}
