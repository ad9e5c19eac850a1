package engine

import (
	"testing"
	"time"
)

// TestArmedOnAQuietTick: a tick in which no member writes, inside a
// burst, arms the loop: the controller is not stepped and its output is
// kept.
func TestArmedOnAQuietTick(t *testing.T) {
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
