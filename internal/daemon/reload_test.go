package daemon

import (
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

// Finding 6 of issue 14: SIGHUP reloads the configuration. The new engine
// is used from the next tick, with the reloaded topology; a Decider that
// cannot adopt the old one's state (not an Adopter) decides alone from
// its first tick: nothing holds the old throttles over its decisions
// (N4; the real engine adopts, see reload_state_test.go).
func TestReloadSwapsEngine(t *testing.T) {
	r := newRig(t, dec(30, 8, "10.99.0.3"))
	r.ticks(3)
	last := func() (time.Duration, int) {
		r.be.mu.Lock()
		defer r.be.mu.Unlock()
		s := r.be.applied[len(r.be.applied)-1]
		if len(s.Groups) == 0 {
			return 0, 0
		}
		return s.Groups[0].WriteDelay, len(s.Groups[0].Members)
	}
	if d, n := last(); d != 8*time.Millisecond || n != 1 {
		t.Fatalf("before the reload: delay %v for %d members, want 8ms for 1", d, n)
	}
	fresh := &fakeEngine{decisions: []Decision{dec(20, 3, "10.99.0.3")}}
	topo := topology.Topology{Resources: []topology.Resource{{Name: "fs-lab", ThresholdMs: 20}}}
	r.d.Reload(Reload{Decider: fresh, Topology: &topo})
	r.ticks(1)
	if got := fresh.topologies(); len(got) != 1 || got[0].Resources[0].ThresholdMs != 20 {
		t.Fatalf("new engine got topologies %+v, want the reloaded one", got)
	}
	if r.eng.steps != 3 || fresh.steps != 1 {
		t.Fatalf("steps: old engine %d (want 3), new %d (want 1)", r.eng.steps, fresh.steps)
	}
	if d, _ := last(); d != 3*time.Millisecond {
		t.Errorf("right after the reload the delay is %v, want the new engine's 3ms", d)
	}
	if s := r.d.Status(); len(s.Resources) != 1 || s.Resources[0].InForceMs != 3 {
		t.Errorf("status after the reload: %+v, want 3 ms in force", s.Resources)
	}
	if r.logs.count("configuration reloaded", "state_kept=false") != 1 {
		t.Errorf("reload not logged:\n%s", r.logs)
	}
	if _, _, closed := r.be.counts(); closed != 0 {
		t.Errorf("the backend was closed %d times by a reload", closed)
	}
}
