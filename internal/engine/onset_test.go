package engine

import (
	"github.com/sanqos/sanqos/internal/control"
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/policy"
	"github.com/sanqos/sanqos/internal/topology"
)

// onsetRig is a resource with a reader (loop0) and three writer hosts
// (loop1-3) whose writes the test switches on and off, the reader's reads
// taking slowMs while any writer writes and 5 ms otherwise.
type onsetRig struct {
	t   *testing.T
	e   *Engine
	d   *disk
	now time.Time
	on  [3]bool
	// light: the writer writes 80 kB/s, under the policy's leave rate.
	light [3]bool
	last  ResourceDecision
}

var writerIPs = [3]netip.Addr{writerIP, otherIP, netip.MustParseAddr("10.0.0.5")}

func newOnsetRig(t *testing.T, mod func(*Config)) *onsetRig {
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	res := topology.Resource{Name: "vg-data", ThresholdMs: 15,
		Consumers: []topology.Consumer{{Addr: readerIP, Device: "loop0"}}}
	for i, ip := range writerIPs {
		res.Consumers = append(res.Consumers, topology.Consumer{Addr: ip, Device: "loop" + string(rune('1'+i))})
	}
	r := &onsetRig{t: t, e: mustEngine(t, cfg, topology.Topology{Resources: []topology.Resource{res}}),
		d: newDisk("loop0", "loop1", "loop2", "loop3"), now: time.Unix(1000, 0)}
	r.step(0)
	return r
}

// step advances one tick with the reader's reads at readMs each.
func (r *onsetRig) step(readMs uint64) ResourceDecision {
	r.now = r.now.Add(100 * time.Millisecond)
	r.d.io("loop0", 3, readMs, 0)
	for i, on := range r.on {
		if on {
			r.d.io("loop"+string(rune('1'+i)), 0, 0, 1280) // 12.8 MB/s
		} else if r.light[i] {
			r.d.io("loop"+string(rune('1'+i)), 0, 0, 8)
		}
	}
	r.last = r.e.Step(r.now, r.d.snap()).Resources[0]
	return r.last
}

// run steps for dur at readMs and returns the last decision.
func (r *onsetRig) run(dur time.Duration, readMs uint64) ResourceDecision {
	for end := r.now.Add(dur); r.now.Before(end); {
		r.step(readMs)
	}
	return r.last
}

// TestOnsetScalesTheDelayForMoreWriters: a writer that starts while
// others are held meets their delay times the ratio of writers, in the
// tick it is first seen writing; writers that stop together and come back
// together meet the delay they left.
func TestOnsetScalesTheDelayForMoreWriters(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		// scaled: the delay after the second host starts is twice the
		// delay before (within 2 %, the pid's own step in that tick);
		// else it is not scaled (under 1.5 times: the thesis's copy
		// moves by its own arithmetic).
		scaled bool
	}{
		// A ceiling far above the delay, so that the clamp (tested with
		// the ceiling) does not hide the ratio.
		{"pid scales 1 to 2 writers", func(c *Config) { c.Control.UMaxMs = 100 }, true},
		{"thesis's copy is not scaled", func(c *Config) { c.Controller = "thesis"; c.Control.UMaxMs = 100 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newOnsetRig(t, tt.mod)
			r.on[0] = true
			// One host alone, over the threshold for half a second,
			// then near the set point (12.75 ms).
			r.run(500*time.Millisecond, 30)
			before := r.run(4*time.Second, 13).ControlMs
			if before <= 0 {
				t.Fatalf("no delay with one writer over the threshold: %+v", r.last)
			}
			r.on[1] = true
			ratio := r.step(13).ControlMs / before
			if tt.scaled != (ratio > 1.96 && ratio < 2.04) || !tt.scaled && ratio >= 1.5 {
				t.Fatalf("delay %.2f ms times %.2f when a second writer started, want scaled=%v (×2)", before, ratio, tt.scaled)
			}
		})
	}
}

// TestOnsetTogetherMeetsTheDelayTheyLeft: hosts that stop about
// together (one writes a little longer, so the count falls while the
// controller still runs) and come back about together (one a tick
// before the others) meet the delay they left: a lower count seen
// before a pause is not learned across it.
func TestOnsetTogetherMeetsTheDelayTheyLeft(t *testing.T) {
	r := newOnsetRig(t, nil)
	r.on = [3]bool{true, true, true}
	r.run(500*time.Millisecond, 30)
	r.run(time.Second, 12) // held: the first climb is over
	r.run(2*time.Second, 13)
	r.on = [3]bool{true, false, false}
	left := r.run(control.ActiveWindow+learnAfter/4, 13).ControlMs
	r.on = [3]bool{}
	r.run(3*time.Second, 5) // inside control.ArmHold: the set keeps them
	r.on = [3]bool{true, false, false}
	r.step(13)
	r.on = [3]bool{true, true, true}
	back := r.step(13)
	if left <= 0 || back.ControlMs > left*1.05 {
		t.Fatalf("writers back together met %.2f ms, they left %.2f: scaled as if fewer had written", back.ControlMs, left)
	}
}

// TestOnsetLearnsFewerWritersOnlyWhileRunning: a lower count is taken as
// the one the delay stands for only after learnAfter with the controller
// stepping, not across a pause.
func TestOnsetLearnsFewerWritersOnlyWhileRunning(t *testing.T) {
	r := newOnsetRig(t, nil)
	r.on = [3]bool{true, true, true}
	r.run(5*time.Second, 30)
	r.run(2*time.Second, 13)
	if got := r.e.res[0].loop.OnsetWriters(); got != 3 {
		t.Fatalf("writers = %d with three hosts writing, want 3", got)
	}
	r.on = [3]bool{true, false, false}
	r.run(learnAfter/2+control.ActiveWindow, 13)
	if got := r.e.res[0].loop.OnsetWriters(); got != 3 {
		t.Fatalf("writers = %d half a learning time after two stopped, want still 3", got)
	}
	r.run(learnAfter, 13)
	if got := r.e.res[0].loop.OnsetWriters(); got != 1 {
		t.Fatalf("writers = %d after %v with one host, want 1", got, learnAfter)
	}
}

// TestOnsetNotInManualPolicy: manual members are named, not found
// writing; their count says nothing about the delay they need.
func TestOnsetNotInManualPolicy(t *testing.T) {
	r := newOnsetRig(t, func(c *Config) {
		c.Policy = policy.ManualName
		c.Manual = ManualConfig{Protected: []string{readerIP.String()},
			Throttle: []string{writerIPs[0].String(), writerIPs[1].String(), writerIPs[2].String()}}
	})
	r.on[0] = true
	r.run(8*time.Second, 30)
	before := r.run(time.Second, 13).ControlMs
	r.on[1] = true
	if got := r.step(13).ControlMs; before > 0 && got/before > 1.5 {
		t.Fatalf("manual policy scaled the delay %.2f -> %.2f at an onset", before, got)
	}
	if r.e.res[0].loop.OnsetWriters() != 0 {
		t.Fatalf("manual policy counted writers: %d", r.e.res[0].loop.OnsetWriters())
	}
}

// learnAfter is control's: a lower count of writers is learned after it.
const learnAfter = 2 * time.Second
