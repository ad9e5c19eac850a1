package engine

import (
	"github.com/sanqos/sanqos/internal/control"
	"testing"
	"time"
)

// TestWindDownArmsTheBurstsDelay: writers whose burst ends slowly (the
// reader's wait falls while they still write, and the controller lowers
// the delay) pause and come back to the delay that held their burst, not
// to the wound-down one; the thesis's copy, whose output cannot be set,
// keeps what it had.
func TestWindDownArmsTheBurstsDelay(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mod    func(*Config)
		lifted bool
	}{
		{"pid", nil, true},
		{"thesis's copy", func(c *Config) { c.Controller = "thesis" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newOnsetRig(t, tt.mod)
			r.on = [3]bool{true, true, true}
			r.run(500*time.Millisecond, 30)
			held := r.run(2*time.Second, 20).ControlMs
			// The burst's last threads: the wait falls, the delay
			// follows it down.
			wound := r.run(1500*time.Millisecond, 5).ControlMs
			if held <= 0 || wound >= held*0.9 {
				t.Fatalf("delay %.2f ms in the burst, %.2f as it wound down: the rig does not wind down", held, wound)
			}
			r.on = [3]bool{}
			r.run(control.ActiveWindow-100*time.Millisecond, 5)
			if got := r.last.ControlMs; got != wound {
				t.Fatalf("output %.2f ms within control.ActiveWindow of the last write, want the wound-down %.2f kept", got, wound)
			}
			paused := r.run(2*time.Second, 5).ControlMs
			r.on = [3]bool{true, true, true}
			back := r.step(13)
			if tt.lifted {
				// Back, the controller steps from the burst's delay
				// (a tick's correction, not the wound-down delay).
				if paused < held*0.99 || back.DelayMs < held*0.9 {
					t.Fatalf("burst held at %.2f ms, wound down to %.2f: armed through the pause at %.2f, back at %.2f; want the burst's", held, wound, paused, back.DelayMs)
				}
			} else if paused != wound {
				t.Fatalf("%s: armed at %.2f ms, want the wound-down %.2f (its output cannot be set)", tt.name, paused, wound)
			}
		})
	}
}

// TestWindDownNotOnAQuietTick: a tick in which no member writes, inside a
// burst, is not a pause: the output is not lifted.
func TestWindDownNotOnAQuietTick(t *testing.T) {
	r := newOnsetRig(t, nil)
	r.on = [3]bool{true, true, true}
	r.run(500*time.Millisecond, 30)
	r.run(2*time.Second, 20)
	wound := r.run(1500*time.Millisecond, 5).ControlMs
	r.on = [3]bool{}
	quiet := r.step(5)
	if !quiet.Armed || quiet.ControlMs != wound {
		t.Fatalf("a quiet tick: armed %v at %.2f ms, want armed at the wound-down %.2f", quiet.Armed, quiet.ControlMs, wound)
	}
}
