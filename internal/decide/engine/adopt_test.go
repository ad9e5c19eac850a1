package engine

import (
	"reflect"
	"testing"
	"time"
)

// heavy is a reader waiting 150 ms per read and a writer at 20 MB/s:
// enough to raise the ceiling.
func heavy(d *disk) {
	d.io("loop0", 10, 150, 0)
	d.io("loop1", 0, 0, 2000)
}

// runEngines steps every engine n ticks on the same snapshots and returns
// each one's last decision.
func runEngines(d *disk, now *time.Time, n int, load func(*disk), es ...*Engine) []Decision {
	out := make([]Decision, len(es))
	for range n {
		*now = now.Add(100 * time.Millisecond)
		load(d)
		snap := d.snap()
		for i, e := range es {
			out[i] = e.Step(*now, snap)
		}
	}
	return out
}

// A reload that changes nothing changes nothing: an engine of the same
// settings that adopts the running one decides, tick for tick, what the
// running one would have decided.
func TestAdoptUnchangedIsSeamless(t *testing.T) {
	d := newDisk("loop0", "loop1")
	old := mustEngine(t, DefaultConfig(), oneResource(0))
	ref := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	before := runEngines(d, &now, 60, heavy, old, ref)[0].Resources[0]
	if before.UMaxMs <= DefaultConfig().Control.UMaxMs || before.DelayMs == 0 {
		t.Fatalf("setup: delay %v ms, ceiling %v ms; want a raised ceiling", before.DelayMs, before.UMaxMs)
	}
	e := mustEngine(t, DefaultConfig(), oneResource(0))
	e.Adopt(old)
	for k := range 40 {
		load := heavy
		if k >= 20 {
			load = func(d *disk) { d.io("loop0", 10, 2, 0); d.io("loop1", 0, 0, 2000) }
		}
		got := runEngines(d, &now, 1, load, e, ref)
		if !reflect.DeepEqual(got[0].Resources, got[1].Resources) || !reflect.DeepEqual(got[0].Consumers, got[1].Consumers) {
			t.Fatalf("tick %d after the reload:\nadopted %+v\nunbroken %+v", k+1, got[0].Resources[0], got[1].Resources[0])
		}
	}
}

// A changed setting resets only what it invalidates: new gains rebuild
// the controller at rest and keep the ceiling and the signal; a new
// threshold keeps the delay too and moves the set point; a new alpha
// keeps the signal's value.
func TestAdoptChangedSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		rest   bool // the controller is rebuilt at rest
	}{
		{"gains", func(c *Config) { c.Control.Kp = 0.3 }, true},
		{"threshold up", func(c *Config) { c.ThresholdMs = 20 }, false},
		{"threshold down", func(c *Config) { c.ThresholdMs = 5 }, false},
		{"alpha", func(c *Config) { c.Alpha = 0.5 }, false},
		{"headroom", func(c *Config) { c.Headroom = 0.2 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDisk("loop0", "loop1")
			old := mustEngine(t, DefaultConfig(), oneResource(0))
			now := time.Unix(0, 0)
			before := runEngines(d, &now, 60, heavy, old)[0].Resources[0]
			cfg := DefaultConfig()
			tc.change(&cfg)
			e := mustEngine(t, cfg, oneResource(0))
			e.Adopt(old)
			after := runEngines(d, &now, 1, heavy, e)[0].Resources[0]
			if tc.rest != (after.DelayMs < 0.5*before.DelayMs) || after.UMaxMs < before.UMaxMs || after.SignalMs < 0.9*before.SignalMs {
				t.Fatalf("before the reload %+v\nafter it %+v (want rebuilt at rest: %v)", before, after, tc.rest)
			}
			if len(after.Members) != 1 {
				t.Fatalf("the writer left the set at the reload: %v", after.Members)
			}
		})
	}
}

// A controller of another law (the thesis's listing) cannot take the pid's
// delay over: it starts at rest, and the ceiling is its own.
func TestAdoptOtherLawStartsAtRest(t *testing.T) {
	d := newDisk("loop0", "loop1")
	old := mustEngine(t, DefaultConfig(), oneResource(0))
	now := time.Unix(0, 0)
	runEngines(d, &now, 60, heavy, old)
	cfg := DefaultConfig()
	cfg.Controller = "thesis"
	e := mustEngine(t, cfg, oneResource(0))
	e.Adopt(old)
	after := runEngines(d, &now, 1, heavy, e)[0].Resources[0]
	if after.UMaxMs != cfg.Control.UMaxMs || after.DelayMs > cfg.Control.UMaxMs || after.SignalMs < 100 {
		t.Fatalf("thesis after pid: %+v", after)
	}
}
