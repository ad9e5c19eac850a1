package throttle

import (
	"context"
	"net/netip"
	"strings"
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

// The edt backend attaches fq and its filter with the first delay and
// detaches them grace after the last, and verifies nothing while idle.
func TestEDTIdle(t *testing.T) {
	ctx := context.Background()
	idle, busy := idleStates()
	k := &fakeEDT{}
	b := newEDT(k, time.Second, nil)
	b.grace = 50 * time.Millisecond
	lock := func() func() { b.mu.Lock(); return b.mu.Unlock }
	calls := func() string { defer lock()(); s := strings.Join(k.calls, "; "); k.calls = nil; return s }
	if err := b.Apply(ctx, idle); err != nil || calls() != "" {
		t.Fatalf("idle: %v, want no call", err)
	}
	if d, err := b.Verify(ctx); d != nil || err != nil || calls() != "" {
		t.Errorf("Verify while idle: %v %v, want no look at the device", d, err)
	}
	if err := b.Apply(ctx, busy); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != "attach; set 10.0.0.2:3260 write 5ms split 128 ttl 1s" {
		t.Errorf("first delay: %q, want attach then set", got)
	}
	if err := b.Apply(ctx, idle); err != nil || calls() != "free 10.0.0.2:3260" {
		t.Fatalf("idle again: %v", err)
	}
	if !waitLocked(t, lock, func() bool { return !b.attached && strings.Join(k.calls, "; ") == "detach" }) {
		t.Errorf("not detached after the grace: %q", calls())
	}
	calls()
	// An armed consumer alone needs the path: the ingress program must
	// see its first write.
	armed := State{Groups: []Group{{Name: "vg", Armed: []netip.Addr{netip.MustParseAddr("10.0.0.3")}, ArmedDelay: 4 * time.Millisecond}}}
	if err := b.Apply(ctx, armed); err != nil {
		t.Fatal(err)
	}
	if got := calls(); got != "attach; set 10.0.0.3:3260 "+Direction(0).String()+" 0s split 128 ttl 1s armed 4ms" {
		t.Errorf("armed only: %q, want attach then the armed entry", got)
	}
	b.Close()
}
