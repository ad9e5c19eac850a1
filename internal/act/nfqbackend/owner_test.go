package nfqbackend

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// testInstance is an instance name no other test process uses at once.
func testInstance(tag string) string {
	return fmt.Sprintf("%s%06d", tag, os.Getpid()%1000000)
}

// TestOwnersNeverTouchEachOther (issue 14, finding 1): a second instance
// starting, and the clean-up of a third, remove neither the chain nor
// the sets of a live instance, while the leftovers of a dead instance and
// of a version before ownership go.
func TestOwnersNeverTouchEachOther(t *testing.T) {
	ctx := context.Background()
	k := owned.NewFakeKernel()
	a, b := testInstance("ta"), testInstance("tb")
	dead := testInstance("td")
	for _, inst := range []string{a, b, dead, testInstance("tc")} {
		acttest.RemoveLockFile(t, owned.LockPath, 0, inst)
	}
	lockA, err := owned.LockInstance(0, a)
	if err != nil {
		t.Fatal(err)
	}
	defer lockA.Release()
	recA := owned.NewOwnedReconciler(k, k, a, 0)
	sA := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: 20 * time.Millisecond}}}
	if err := recA.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recA.Apply(ctx, NfqueueRules(sA, 1), plan.WantSets(sA)); err != nil {
		t.Fatal(err)
	}
	aHolds := k.String()
	// A dead instance (its lock is free) and a pre-ownership run left
	// their chains and sets.
	k.CrashAs(owned.Chain+"-"+dead, []string{"-A " + owned.Chain + "-" + dead + " -j NFQUEUE --queue-num 9"}, map[string][]netip.Addr{owned.SetPrefix + dead + "-vg": {ip("10.0.0.9")}})
	k.Crash([]string{"-A SANQOS -j NFQUEUE --queue-num 1"}, map[string][]netip.Addr{"sanqos-old": {ip("10.0.0.8")}})

	// B starts: it takes its own lock, clears its own leftovers and the
	// dead ones', and installs its own state.
	lockB, err := owned.LockInstance(0, b)
	if err != nil {
		t.Fatal(err)
	}
	recB := owned.NewOwnedReconciler(k, k, b, 0)
	if err := recB.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if err := recB.SweepDead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != aHolds {
		t.Fatalf("after B's start the kernel holds\n%s\nwant A's state only:\n%s", got, aHolds)
	}
	sB := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: 5 * time.Millisecond}}}
	if err := recB.Apply(ctx, NfqueueRules(sB, 2), plan.WantSets(sB)); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); !containsLines(got, aHolds) || !strings.Contains(got, owned.SetPrefix+b+"-vg: 10.0.0.3") {
		t.Fatalf("kernel holds\n%s\nwant A's and B's state side by side", got)
	}
	// A clean-up-only run for A's name is refused while A lives.
	if _, err := owned.LockInstance(0, a); !errors.Is(err, owned.ErrInstanceRunning) {
		t.Fatalf("taking a live instance's lock: %v, want ErrInstanceRunning", err)
	}
	// B stops: only B's objects go.
	if err := recB.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	lockB.Release()
	if got := k.String(); got != aHolds {
		t.Fatalf("after B's close the kernel holds\n%s\nwant A's state:\n%s", got, aHolds)
	}
	// A clean-up run of another instance sweeps B (dead now, nothing
	// left) and leaves A alone.
	recC := owned.NewOwnedReconciler(k, k, testInstance("tc"), 0)
	if err := recC.SweepDead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != aHolds {
		t.Fatalf("after C's sweep the kernel holds\n%s\nwant A's state:\n%s", got, aHolds)
	}
	// Once A is dead (lock free), its leftovers are swept.
	lockA.Release()
	if err := recC.SweepDead(ctx); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != "" {
		t.Fatalf("a dead instance's objects stayed:\n%s", got)
	}
}

// TestOwnedNamesFit: chain and set names of the longest instance name
// stay within the kernel's limits and never collide between groups or
// instances.
func TestOwnedNamesFit(t *testing.T) {
	seen := map[string]string{}
	for _, inst := range []string{"q3260", "abcdefgh", "t1"} {
		o := owned.Owner{Name: inst}
		if c := o.Chain(); len(c) > 28 {
			t.Fatalf("chain %q over 28 characters", c)
		}
		if in, ok := owned.ChainOwner(o.Chain()); !ok || in != inst {
			t.Fatalf("chainOwner(%q) = %q %v", o.Chain(), in, ok)
		}
		for _, g := range []string{"vg", "a-very-long-resource-name-that-needs-hashing", "a-very-long-resource-name-that-needs-hashinG", "fs/sda1"} {
			n := o.Set(plan.SetName(g))
			if len(n) > owned.MaxSetName {
				t.Fatalf("set %q over %d characters", n, owned.MaxSetName)
			}
			if in, ok := owned.SetOwner(n); !ok || in != inst {
				t.Fatalf("setOwner(%q) = %q %v, want %q", n, in, ok, inst)
			}
			if prev, ok := seen[n]; ok {
				t.Fatalf("set %q for %s/%s and %s", n, inst, g, prev)
			}
			seen[n] = inst + "/" + g
		}
	}
	if err := owned.CheckInstance("Bad-Name"); err == nil {
		t.Fatal("an instance name with capitals and a dash was accepted")
	}
}

// containsLines reports whether every line of want is a line of got.
func containsLines(got, want string) bool {
	have := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(want, "\n") {
		if !have[l] {
			return false
		}
	}
	return true
}

// TestMixedIPv6StateKeepsIPv4Controlled (issue 14, finding 4): one IPv6
// consumer, or one group with too many ports, is refused on its own with
// an error naming it; the IPv4 consumers of the same and other groups are
// still programmed.
func TestMixedIPv6StateKeepsIPv4Controlled(t *testing.T) {
	many := make([]uint16, 16)
	for i := range many {
		many[i] = uint16(3260 + i)
	}
	s := plan.State{Groups: []plan.Group{
		{Name: "vg", Members: []netip.Addr{ip("10.0.0.2"), ip("fd00::2"), ip("::ffff:10.0.0.4")}, WriteDelay: 20 * time.Millisecond},
		{Name: "pool", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: 5 * time.Millisecond},
		{Name: "wide", Members: []netip.Addr{ip("10.0.0.5")}, Ports: many, WriteDelay: 5 * time.Millisecond},
	}}
	if err := plan.ValidateShape(s); err != nil {
		t.Fatal(err)
	}
	ok, refused := plan.Split(s)
	if refused == nil || len(refused.Reasons) != 2 {
		t.Fatalf("refused %v, want the IPv6 consumer and the 16-port group", refused)
	}
	msg := refused.Error()
	for _, want := range []string{"fd00::2", "IPv6", `"wide"`, "16 ports", "at most 15"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal %q does not say %q", msg, want)
		}
	}
	k := owned.NewFakeKernel()
	rec := owned.NewReconciler(k, k)
	if err := rec.Apply(context.Background(), NfqueueRules(ok, 1), plan.WantSets(ok)); err != nil {
		t.Fatal(err)
	}
	got := k.String()
	for _, want := range []string{"set sanqos-vg: 10.0.0.2 10.0.0.4", "set sanqos-pool: 10.0.0.3", "--match-set sanqos-vg dst", "--match-set sanqos-pool dst"} {
		if !strings.Contains(got, want) {
			t.Fatalf("kernel holds\n%s\nwant %q: the IPv4 consumers must stay controlled", got, want)
		}
	}
	if strings.Contains(got, "wide") {
		t.Fatalf("the refused group was programmed:\n%s", got)
	}
	if _, refused := plan.Split(s); refused == nil {
		t.Fatal("Split (what the tc backends leave out) kept IPv6 and 16 ports")
	}
}

// TestHealthyTellsAStuckPacketPath (issue 14, finding 5): Healthy passes
// while the packet path went round its loop within HealthyWithin and
// fails, saying so, once it has not (the daemon's watchdog feeds on it).
func TestHealthyTellsAStuckPacketPath(t *testing.T) {
	b := &Nfqueue{}
	b.alive.Store(t0.UnixNano())
	if err := b.Healthy(t0.Add(heartbeat)); err != nil {
		t.Fatalf("a path that ran one heartbeat ago: %v", err)
	}
	err := b.Healthy(t0.Add(HealthyWithin + time.Millisecond))
	if err == nil || !strings.Contains(err.Error(), "not run for") {
		t.Fatalf("a path stuck for over %v: %v", HealthyWithin, err)
	}
	b.stopping.Store(true)
	if b.Healthy(t0) == nil {
		t.Fatal("a closed backend reported healthy")
	}
}
