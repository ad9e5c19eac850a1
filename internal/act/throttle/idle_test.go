package throttle

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
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

// The tc backends keep no qdisc on the device while nobody is throttled:
// the first throttle installs the tree in the same Apply, and it goes
// IdleGrace after the last one ended (not at once: it may hold packets),
// unless a throttle came back meanwhile.
func TestTCRootIdle(t *testing.T) {
	ctx := context.Background()
	idle, busy := idleStates()
	for _, mk := range []func(TCConfig) (interface {
		Backend
		Verifier
	}, *tcRoot, error){
		func(c TCConfig) (interface {
			Backend
			Verifier
		}, *tcRoot, error) {
			b, err := NewNetem(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			return b, &b.tcRoot, nil
		},
		func(c TCConfig) (interface {
			Backend
			Verifier
		}, *tcRoot, error) {
			b, err := NewHTB(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			return b, &b.tcRoot, nil
		},
	} {
		rec := &recorder{}
		k := owned.NewFakeKernel()
		b, root, err := mk(TCConfig{Dev: "veth-t", Instance: "ti", Run: rec, Firewall: k, Sets: k, IdleGrace: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		lock := func() func() { root.mu.Lock(); return root.mu.Unlock }
		if rec.root != "" {
			t.Fatalf("%s: root qdisc %q after start, want none", b.Name(), rec.root)
		}
		if err := b.Apply(ctx, idle); err != nil || rec.root != "" || len(chains(k)) != 0 {
			t.Fatalf("%s idle: err %v, root %q, rules %q; want nothing installed", b.Name(), err, rec.root, chains(k))
		}
		if d, err := b.Verify(ctx); err != nil || len(d) != 0 || rec.root != "" {
			t.Errorf("%s: Verify while idle: %v %v, root %q; want nothing to repair", b.Name(), d, err, rec.root)
		}
		if err := b.Apply(ctx, busy); err != nil || rec.root == "" || len(chains(k)) == 0 {
			t.Fatalf("%s throttled: err %v, root %q, rules %q; want both in one apply", b.Name(), err, rec.root, chains(k))
		}
		if err := b.Apply(ctx, idle); err != nil || len(chains(k)) != 0 {
			t.Fatalf("%s idle again: err %v, rules %q", b.Name(), err, chains(k))
		}
		if rec.root == "" {
			t.Errorf("%s: the tree went at once, with packets maybe in it", b.Name())
		}
		// Throttled again within the grace: the tree stays.
		if err := b.Apply(ctx, busy); err != nil {
			t.Fatal(err)
		}
		time.Sleep(80 * time.Millisecond)
		if unlock := lock(); rec.root == "" {
			unlock()
			t.Fatalf("%s: the tree went while throttled", b.Name())
		} else {
			unlock()
		}
		if err := b.Apply(ctx, idle); err != nil {
			t.Fatal(err)
		}
		if !waitLocked(t, lock, func() bool { return rec.root == "" && !root.installed }) {
			t.Errorf("%s: root qdisc %q still there after the grace", b.Name(), rec.root)
		}
		if err := b.Apply(ctx, busy); err != nil || rec.root == "" {
			t.Errorf("%s: throttled after the teardown: %v, root %q", b.Name(), err, rec.root)
		}
		if err := b.Close(); err != nil || rec.root != "" {
			t.Errorf("%s: close: %v, root %q", b.Name(), err, rec.root)
		}
	}
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

// chains lists the fake kernel's chains.
func chains(k *owned.FakeKernel) []string {
	cs, _ := k.Chains(context.Background())
	return cs
}
