package nfqbackend

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/act/plan/plantest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// expected renders what the fake kernel must hold for s under the nfqueue
// backend, computed independently of the reconciler.
func expected(s plan.State, queue uint16) string {
	rules := NfqueueRules(s, queue)
	var b strings.Builder
	if len(rules) > 0 {
		fmt.Fprintf(&b, "-A POSTROUTING -j SANQOS (x1)\n:SANQOS\n")
		for _, r := range rules {
			b.WriteString(r + "\n")
		}
	}
	sets := plan.WantSets(s)
	for _, n := range slices.Sorted(maps.Keys(sets)) {
		fmt.Fprintf(&b, "set %s:", n)
		as := slices.Clone(sets[n])
		slices.SortFunc(as, netip.Addr.Compare)
		for _, a := range slices.Compact(as) {
			fmt.Fprintf(&b, " %s", a)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func randomState(r *rand.Rand) plan.State {
	names := []string{"vg-data", "fs-sda1", "disk/sdb", "a-very-long-resource-name-that-needs-hashing"}
	addrs := []netip.Addr{ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.4"), ip("10.0.0.5")}
	var s plan.State
	for _, n := range names {
		if r.IntN(3) == 0 {
			continue
		}
		g := plan.Group{Name: n}
		for _, a := range addrs {
			if r.IntN(2) == 0 {
				g.Members = append(g.Members, a)
			}
		}
		if r.IntN(2) == 0 {
			g.WriteDelay = time.Duration(r.IntN(40)) * 500 * time.Microsecond
		}
		if r.IntN(4) == 0 {
			g.ReadDelay = time.Duration(r.IntN(40)) * 500 * time.Microsecond
		}
		if r.IntN(5) == 0 {
			g.Ports = []uint16{3260, 3261}
		}
		s.Groups = append(s.Groups, g)
	}
	r.Shuffle(len(s.Groups), func(i, j int) { s.Groups[i], s.Groups[j] = s.Groups[j], s.Groups[i] })
	return s
}

// TestReconcileRandomTransitions drives the reconciler through random
// state sequences on the fake kernel: after every Apply the kernel holds
// exactly the state, a repeated Apply changes nothing, and a reset leaves
// nothing of ours but foreign sets untouched.
func TestReconcileRandomTransitions(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	k := owned.NewFakeKernel()
	k.Foreign["other-set"] = true
	k.PutSet("other-set", ip("192.0.2.1"))
	rec := owned.NewReconciler(k, k)
	for i := range 500 {
		s := randomState(r)
		if err := rec.Apply(ctx, NfqueueRules(s, 7), plan.WantSets(s)); err != nil {
			t.Fatalf("step %d: apply: %v", i, err)
		}
		if got, want := k.String(), expected(s, 7); got != want {
			t.Fatalf("step %d: kernel holds\n%s\nwant\n%s", i, got, want)
		}
		ops := k.Ops
		if err := rec.Apply(ctx, NfqueueRules(s, 7), plan.WantSets(s)); err != nil {
			t.Fatalf("step %d: second apply: %v", i, err)
		}
		if k.Ops != ops {
			t.Fatalf("step %d: applying the same state again made %d kernel changes", i, k.Ops-ops)
		}
	}
	if err := rec.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != "" {
		t.Fatalf("after reset the kernel still holds\n%s", got)
	}
	if !k.HasSet("other-set") {
		t.Fatal("reset destroyed a set that is not ours")
	}
}

// TestReconcileOnlyDifferences checks that a membership change is set
// operations only, and a delay change on an active group touches nothing.
func TestReconcileOnlyDifferences(t *testing.T) {
	ctx := context.Background()
	k := owned.NewFakeKernel()
	rec := owned.NewReconciler(k, k)
	s := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: time.Millisecond}}}
	if err := rec.Apply(ctx, NfqueueRules(s, 1), plan.WantSets(s)); err != nil {
		t.Fatal(err)
	}
	ops := k.Ops
	s.Groups[0].WriteDelay = 5 * time.Millisecond
	if err := rec.Apply(ctx, NfqueueRules(s, 1), plan.WantSets(s)); err != nil {
		t.Fatal(err)
	}
	if k.Ops != ops {
		t.Fatalf("a delay change made %d kernel changes, want 0", k.Ops-ops)
	}
	s.Groups[0].Members = append(s.Groups[0].Members, ip("10.0.0.3"))
	if err := rec.Apply(ctx, NfqueueRules(s, 1), plan.WantSets(s)); err != nil {
		t.Fatal(err)
	}
	if k.Ops != ops+1 {
		t.Fatalf("adding a member made %d kernel changes, want 1 (ipset add)", k.Ops-ops)
	}
}

// TestStartupRemovesCrashLeftovers: a crashed run left a doubled jump, a
// chain and sets; the next start (reset) removes them all.
func TestStartupRemovesCrashLeftovers(t *testing.T) {
	k := owned.NewFakeKernel()
	k.Crash([]string{"-A SANQOS -j NFQUEUE --queue-num 1"}, map[string][]netip.Addr{"sanqos-old": {ip("10.0.0.9")}})
	rec := owned.NewReconciler(k, k)
	if err := rec.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != "" {
		t.Fatalf("leftovers survived start-up:\n%s", got)
	}
}

func TestNfqueueGolden(t *testing.T) {
	ctx := context.Background()
	rec := &acttest.Recorder{}
	k := owned.NewFakeKernel()
	rc := owned.NewReconciler(&owned.Iptables{Run: rec}, k)
	if err := rc.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range plantest.GoldenStates() {
		fmt.Fprintf(&rec.Log, "# state %d\n", i)
		if err := rc.Apply(ctx, NfqueueRules(s, DefaultQueueNum), plan.WantSets(s)); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rec.Log, "# sets\n%s", k.String())
	}
	acttest.Golden(t, *update, "nfqueue.golden", rec.Log.String())
}
