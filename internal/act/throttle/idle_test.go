package throttle

import (
	"net/netip"
	"testing"
	"time"
)

// idleStates are a throttle that starts and ends: a known consumer
// nobody throttles, the same consumer delayed, and idle again.
func idleStates() (idle, busy State) {
	g := Group{Name: "vg", Members: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
	idle = State{Groups: []Group{g}}
	g.WriteDelay, g.ReadRate = 5*time.Millisecond, 1<<20
	busy = State{Groups: []Group{g}}
	return idle, busy
}

// waitLocked polls cond (under lock) until it holds or a second passed.
func waitLocked(t *testing.T, lock func() func(), cond func() bool) bool {
	t.Helper()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		unlock := lock()
		ok := cond()
		unlock()
		if ok {
			return true
		}
	}
	return false
}
