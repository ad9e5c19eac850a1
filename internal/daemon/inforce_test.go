package daemon

import (
	"testing"
)

// Each consumer's status shows the delay the engine put on its flows and
// the one the data path holds it at; a failed apply leaves the last one
// in force, and the two then differ (issue 33).
func TestConsumerDelayInForce(t *testing.T) {
	held := func(delay float64) Decision {
		d := dec(30, delay, "10.99.0.3")
		d.Consumers[0].DelayMs, d.Consumers[0].OutstandingWrites = delay, 3.2
		return d
	}
	r := newRig(t, held(8), held(12), held(12))
	steps := []struct {
		fail             bool
		decided, inForce float64
	}{
		{false, 8, 8},
		{true, 12, 8}, // the apply fails: the kernel keeps 8 ms
		{false, 12, 12},
	}
	for i, s := range steps {
		if s.fail {
			r.be.mu.Lock()
			r.be.failN = r.be.calls + 1
			r.be.mu.Unlock()
		}
		r.ticks(1)
		cs := r.d.Status().Consumers
		if len(cs) != 1 || cs[0].DelayMs != s.decided || cs[0].InForceMs != s.inForce || cs[0].OutstandingWrites != 3.2 {
			t.Fatalf("tick %d: consumers %+v, want %v ms decided and %v ms in force", i+1, cs, s.decided, s.inForce)
		}
	}
}
