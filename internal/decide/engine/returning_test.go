package engine

import (
	"github.com/sanqos/sanqos/internal/decide/control"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
)

// TestReturningWritersAreNamed: writers that were held and paused are
// named returning, with the delay they left, for control.ArmHold after they were
// last in the set; the reader, never in it, never is; a writer in the set
// is a member, and one that goes on writing lightly is neither; the write
// direction and the read-over-write policy only.
func TestReturningWritersAreNamed(t *testing.T) {
	r := newOnsetRig(t, nil)
	r.on = [3]bool{true, true, false}
	rd := r.run(5*time.Second, 40)
	if len(rd.Members) != 2 || rd.ControlMs <= 0 || len(rd.Returning) != 0 {
		t.Fatalf("while two writers write: members %v, returning %v, control %.1f ms", rd.Members, rd.Returning, rd.ControlMs)
	}
	r.on = [3]bool{}
	rd = r.run(5*time.Second, 5)
	if len(rd.Members) != 0 {
		t.Fatalf("the writers are still in the set 5 s after they stopped: %v", rd.Members)
	}
	if !slices.Equal(rd.Returning, writerIPs[:2]) || rd.ControlMs <= 0 {
		t.Fatalf("paused writers: returning %v (want %v), control %.1f ms", rd.Returning, writerIPs[:2], rd.ControlMs)
	}
	if slices.Contains(rd.Returning, readerIP) || slices.Contains(rd.Returning, writerIPs[2]) {
		t.Fatalf("a consumer that was never held is returning: %v", rd.Returning)
	}
	// A returning writer that writes stays armed while it may rejoin (the
	// policy takes a tick or two), for up to control.ActiveWindow; one that writes
	// too little to join (under the leave rate) is then armed no more, and
	// stays so while it goes on writing.
	r.light[1] = true
	if rd := r.step(5); !slices.Contains(rd.Returning, writerIPs[1]) {
		t.Fatalf("a returning writer was disarmed by its first write: returning %v", rd.Returning)
	}
	if rd := r.run(3*time.Second, 5); len(rd.Members) != 0 || slices.Contains(rd.Returning, writerIPs[1]) {
		t.Fatalf("a light writer: members %v, returning %v", rd.Members, rd.Returning)
	}
	r.light[1] = false
	rd = r.run(2*time.Second, 5)
	if !slices.Equal(rd.Returning, writerIPs[:2]) {
		t.Fatalf("the light writer paused: returning %v, want %v", rd.Returning, writerIPs[:2])
	}
	th := Decision{Resources: []ResourceDecision{rd}}.Throttles()[0]
	if !slices.Equal(th.Armed, rd.Returning) || th.ArmedDelay <= 0 || len(th.Members) != 0 || th.Delay != 0 {
		t.Fatalf("throttle for the paused writers: %+v", th)
	}

	// One comes back: it is a member, the other still returning.
	r.on = [3]bool{true, false, false}
	rd = r.run(500*time.Millisecond, 40)
	if !slices.Equal(rd.Members, writerIPs[:1]) || !slices.Equal(rd.Returning, writerIPs[1:2]) {
		t.Fatalf("one writer back: members %v, returning %v", rd.Members, rd.Returning)
	}
	r.on = [3]bool{}
	rd = r.run(control.ArmHold+5*time.Second, 5)
	if len(rd.Returning) != 0 {
		t.Fatalf("still returning %v more than control.ArmHold after they were held", rd.Returning)
	}

	for _, mod := range []struct {
		name string
		f    func(*Config)
	}{
		{"read direction", func(c *Config) { c.Direction = direction.Read }},
		{"manual policy", func(c *Config) {
			c.Policy = policy.ManualName
			c.Manual = ManualConfig{Protected: []string{readerIP.String()}, Throttle: []string{"loop1", "loop2"}}
		}},
	} {
		r := newOnsetRig(t, mod.f)
		r.on = [3]bool{true, true, false}
		r.run(3*time.Second, 40)
		r.on = [3]bool{}
		if rd := r.run(5*time.Second, 5); len(rd.Returning) != 0 {
			t.Errorf("%s: returning %v", mod.name, rd.Returning)
		}
	}
}
