package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// onsetRig is a resource with a reader (loop0) and three writer hosts
// (loop1-3) whose writes the test switches on and off, the reader's reads
// taking slowMs while any writer writes and 5 ms otherwise: writers
// pausing and coming back, for the armed pauses and returning writers.
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
