package nfqbackend

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// rtThreadTicks sums the CPU time (clock ticks) of this process's
// real-time threads: the packet thread and the standby of each backend.
// System time includes the kernel's work after each verdict, which on a
// veth is the whole receiving TCP stack of both namespaces (the accepted
// ACK is delivered, processed and answered with new data in the same
// call); on a NIC it would be a queue insert. User time is the delayer's.
func rtThreadTicks(t *testing.T) (user, sys int) {
	tasks, err := filepath.Glob("/proc/self/task/*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
		// after the command: state is field 3, utime 14, stime 15, policy 41
		if len(f) < 39 || f[38] != "1" { // SCHED_FIFO
			continue
		}
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		user += u
		sys += s
	}
	return user, sys
}

const ticksPerSecond = 100 // USER_HZ

// TestLiveMeasure logs the numbers of the report: overhead of an idle
// sanqos on bulk throughput (interleaved with no sanqos), the packet
// path's CPU share at a 40 MB/s write stream, and its capacity. It asserts
// only what must hold: an idle sanqos sends no packet to user space.
func TestLiveMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement run; skipped with -short")
	}
	l := newLab(t)
	l.rcvbuf = 0 // kernel defaults: bulk TCP as fast as the veth goes
	// The capacity run holds an upload's pure ACKs.
	b := l.backendWith(t, NfqueueConfig{AckDelay: true})
	idle := plan.State{Groups: []plan.Group{{Name: "tt", Members: []netipAddr{mustAddr(clientIP)}}}}
	var with, without []float64
	for range 5 {
		if err := b.Apply(t.Context(), plan.State{}); err != nil {
			t.Fatal(err)
		}
		r, done := l.upload(300 * time.Millisecond)
		done()
		without = append(without, r)
		if err := b.Apply(t.Context(), idle); err != nil {
			t.Fatal(err)
		}
		r, done = l.upload(300 * time.Millisecond)
		done()
		with = append(with, r)
	}
	slices.Sort(with)
	slices.Sort(without)
	t.Logf("overhead: bulk upload, 5 interleaved runs, median MB/s: no sanqos %.0f, idle sanqos (rule installed, set empty) %.0f, ratio %.3f",
		without[2]/1e6, with[2]/1e6, with[2]/without[2])
	if s := b.Stats(); s.PacketsPassed != 0 {
		t.Errorf("idle sanqos passed %d packets through user space, want 0", s.PacketsPassed)
	}
	// With a rule installed and no packet, the packet thread sleeps: the
	// real-time CPU time is the standby's, watching.
	u0, k0 := rtThreadTicks(t)
	time.Sleep(3 * time.Second)
	u1, k1 := rtThreadTicks(t)
	t.Logf("standby watching the packet thread (rule installed, no packets): %.1f%% of one core", 100*float64(u1-u0+k1-k0)/ticksPerSecond/3)

	// A 40 MB/s write stream, ACKs per segment as on a real NIC (no
	// GSO/GRO on the veth), write delay 1 ms.
	for _, c := range []struct {
		r   owned.ExecRunner
		dev string
	}{{l.targetRunner, "sqtt0"}, {l.clientRunner, "sqtt1"}} {
		if _, err := c.r.Run(t.Context(), "", "ethtool", "-K", c.dev, "tso", "off", "gso", "off", "gro", "off"); err != nil {
			t.Logf("ethtool: %v (ACK rate may be lower than on a NIC)", err)
		}
	}
	l.throttle(t, b, time.Millisecond, 0)
	s0, t0 := b.Stats(), time.Now()
	u0, k0 = rtThreadTicks(t)
	rate, done := l.uploadPaced(3*time.Second, 40e6)
	s1, t1 := b.Stats(), time.Now()
	u1, k1 = rtThreadTicks(t)
	done()
	el := t1.Sub(t0).Seconds()
	pps := float64(s1.PacketsPassed-s0.PacketsPassed) / el
	t.Logf("40 MB/s write stream (measured %.1f MB/s), write delay 1ms: %.0f packets/s through the delayer; packet thread: user %.1f%%, system %.1f%% of one core (system includes the veth peers' TCP work); delay error p50 %v max %v",
		rate/1e6, pps, 100*float64(u1-u0)/ticksPerSecond/el, 100*float64(k1-k0)/ticksPerSecond/el, s1.DelayErrorP50, s1.DelayErrorMax)
	if s1.PacketsHeld == s0.PacketsHeld || s1.PacketsPassed == s0.PacketsPassed {
		t.Errorf("40 MB/s write stream under a 1ms write delay: held %d, passed %d packets; want the delayer to hold and release its ACKs",
			s1.PacketsHeld-s0.PacketsHeld, s1.PacketsPassed-s0.PacketsPassed)
	}

	// Capacity: unpaced upload, ACKs per segment, write delay 0.5 ms.
	l.throttle(t, b, 500*time.Microsecond, 0)
	s0, t0 = b.Stats(), time.Now()
	u0, k0 = rtThreadTicks(t)
	rate, done = l.upload(3 * time.Second)
	s1, t1 = b.Stats(), time.Now()
	u1, k1 = rtThreadTicks(t)
	done()
	el = t1.Sub(t0).Seconds()
	pps = float64(s1.PacketsPassed-s0.PacketsPassed) / el
	user := float64(u1-u0) / ticksPerSecond / el
	t.Logf("unpaced upload (%.1f MB/s), write delay 0.5ms: %.0f packets/s held and released; packet thread: user %.1f%%, system %.1f%% of one core → user-space capacity about %.0f packets/s per core; bypassed %d",
		rate/1e6, pps, 100*user, 100*float64(k1-k0)/ticksPerSecond/el, pps/max(user, 0.01), s1.Bypassed)
	if s1.PacketsHeld == s0.PacketsHeld {
		t.Error("unpaced upload under a 0.5ms write delay: no packet held")
	}
}
