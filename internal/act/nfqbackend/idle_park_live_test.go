//go:build linux

package nfqbackend

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// switchesOf is a thread's context switches so far, voluntary and not,
// from /proc/self/task/TID/status.
func switchesOf(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ln := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(ln, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
			c, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("%s: %v", ln, err)
			}
			n += c
		}
	}
	return n
}

// packetThread is the tid of the process's sanqos-packet thread. The
// packet loop names its thread once it runs, which may be after the
// backend is returned: it looks for up to 2 s.
func packetThread(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tids, err := processThreads()
		if err != nil {
			t.Fatal(err)
		}
		for _, tid := range tids {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", tid))
			if strings.TrimSpace(string(comm)) == "sanqos-packet" {
				return tid
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no sanqos-packet thread 2 s after the backend started")
		}
	}
}

// TestLivePacketThreadParksWhileIdle (issue 35): with no rule installed
// the packet thread parks in the Go scheduler and wakes only every
// heartbeat, instead of waiting in raw ppoll, where the scheduler's
// monitor takes it for a busy thread and preempts it with a signal every
// 10–20 ms. The first throttle wakes it at once, and a held packet is
// then released on time.
func TestLivePacketThreadParksWhileIdle(t *testing.T) {
	l := newLab(t)
	b := l.backend(t)
	tid := packetThread(t)
	time.Sleep(idleAfter + 2*heartbeat)
	const window = 2 * time.Second
	before := switchesOf(t, tid)
	time.Sleep(window)
	idle := switchesOf(t, tid) - before
	// A heartbeat's wake-up and the yield of that round: a handful per
	// heartbeat, against 100–200 preemptions in the window without it.
	if limit := 4 * int(window/heartbeat); idle > limit {
		t.Errorf("idle packet thread: %d context switches in %v, want at most %d (it parks, waking every %v)", idle, window, limit, heartbeat)
	}
	beat := b.beat.Load()
	start := time.Now()
	l.throttle(t, b, 5*time.Millisecond, 0)
	for b.beat.Load() == beat {
		if time.Since(start) > heartbeat/2 {
			t.Fatalf("the packet thread did not wake within %v of the first throttle", heartbeat/2)
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Logf("idle: %d context switches of the packet thread in %v; the first throttle woke it in %v", idle, window, time.Since(start))
}
