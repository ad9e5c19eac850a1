package throttle

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/acttest"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// TestInstalledRuleForm: the rules we install are in iptables-save's
// own form, so that what owned.Iptables.Installed reads back compares
// equal (see owned's TestParseSave for the same rule read back).
func TestInstalledRuleForm(t *testing.T) {
	want := "-A SANQOS-q3260 -p tcp -m tcp --sport 3260 -m set --match-set sanqos-q3260-r1 dst -j NFQUEUE --queue-num 3260 --queue-bypass"
	if got := (owned.Owner{Name: "q3260"}).Rule(NfqueueRules(State{Groups: []Group{{Name: "r1"}}}, 3260)[0]); got != want {
		t.Errorf("rule %q, want %q: the form iptables-save prints", got, want)
	}
}

// Verify finds each kind of tampering, names it, and makes the next
// apply of the same state put everything back; a kernel as installed has
// no drift, and entries the kernel added itself (arming) are none.
func TestVerifyFindsAndRepairsTampering(t *testing.T) {
	ctx := context.Background()
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2"), ip("10.0.0.3")}, WriteDelay: time.Millisecond}}}
	for _, c := range []struct {
		name   string
		tamper func(k *owned.FakeKernel)
		want   []string // objects
	}{
		{"none", func(*owned.FakeKernel) {}, nil},
		{"armed entry added by the kernel", func(k *owned.FakeKernel) { _ = k.Add(ctx, "sanqos-q1-vg", ip("10.0.0.9")) }, nil},
		{"iptables -F POSTROUTING", (*owned.FakeKernel).FlushHook, []string{"jump"}},
		{"nft flush ruleset", (*owned.FakeKernel).FlushRuleset, []string{"jump", "chain"}},
		{"ipset flush", (*owned.FakeKernel).FlushSets, []string{"member"}},
		{"ipset del", func(k *owned.FakeKernel) { _ = k.Del(ctx, "sanqos-q1-vg", ip("10.0.0.3")) }, []string{"member"}},
		{"rule replaced", func(k *owned.FakeKernel) {
			k.SetChain("SANQOS-q1", []string{"-A SANQOS-q1 -j ACCEPT"})
		}, []string{"rule"}},
		{"set destroyed", func(k *owned.FakeKernel) {
			k.SetChain("SANQOS-q1", nil)
			k.DropSet("sanqos-q1-vg")
		}, []string{"rule", "set"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := owned.NewFakeKernel()
			r := owned.NewOwnedReconciler(k, k, "q1", 0)
			rules, sets := NfqueueRules(s, 1), plan.WantSets(s)
			if err := r.Apply(ctx, rules, sets); err != nil {
				t.Fatal(err)
			}
			installed := k.String()
			c.tamper(k)
			have, _ := k.List(ctx)
			drifts, err := r.Verify(ctx, have)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range drifts {
				got = append(got, d.Object)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("drifts %v, want objects %v", drifts, c.want)
			}
			if c.want == nil {
				return
			}
			if err := r.Apply(ctx, rules, sets); err != nil {
				t.Fatal(err)
			}
			if k.String() != installed {
				t.Errorf("after the next apply the kernel holds\n%s\nwant\n%s", k.String(), installed)
			}
			have, _ = k.List(ctx)
			if drifts, _ := r.Verify(ctx, have); len(drifts) != 0 {
				t.Errorf("drift after the repair: %v", drifts)
			}
		})
	}
}

// Resync re-installs what Verify cannot see (a firewall without
// ChainReader): the next apply replaces the chain whole.
func TestResyncReplacesTheChain(t *testing.T) {
	ctx := context.Background()
	k := owned.NewFakeKernel()
	r := owned.NewOwnedReconciler(struct{ owned.Firewall }{k}, k, "q1", 0)
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: time.Millisecond}}}
	if err := r.Apply(ctx, NfqueueRules(s, 1), plan.WantSets(s)); err != nil {
		t.Fatal(err)
	}
	installed := k.String()
	k.FlushRuleset()
	have, _ := k.List(ctx)
	if d, _ := r.Verify(ctx, have); len(d) != 0 {
		t.Fatalf("a firewall that cannot be read back reported %v", d)
	}
	r.Invalidate()
	if err := r.Apply(ctx, NfqueueRules(s, 1), plan.WantSets(s)); err != nil {
		t.Fatal(err)
	}
	if k.String() != installed {
		t.Errorf("after a resync the kernel holds\n%s\nwant\n%s", k.String(), installed)
	}
}

// A root qdisc someone deleted is rebuilt with its leaves (netem) and
// its read-rate classes come back with the next Apply (htb); a root of
// someone else's is named in the drift.
func TestVerifyRebuildsADeletedRootQdisc(t *testing.T) {
	ctx := context.Background()
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: 5 * time.Millisecond, ReadRate: 1 << 20}}}
	rec := &acttest.Recorder{}
	k := owned.NewFakeKernel()
	n, err := NewNetem(ctx, TCConfig{Dev: "veth-t", Instance: "tv1", Run: rec, Firewall: k, Sets: k})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if d, err := n.Verify(ctx); err != nil || len(d) != 0 {
		t.Fatalf("as installed: drift %v, err %v", d, err)
	}
	rec.Root = "" // tc qdisc del dev veth-t root
	rec.Log.Reset()
	d, err := n.Verify(ctx)
	if err != nil || len(d) != 1 || d[0].Object != "qdisc" {
		t.Fatalf("after the root went: drift %v, err %v", d, err)
	}
	if got := rec.Log.String(); rec.Root != "53:" || !strings.Contains(got, "netem delay 5000us") {
		t.Errorf("the tree was not rebuilt with its leaves:\n%s", got)
	}

	hrec := &acttest.Recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-u", Instance: "tv2", Run: hrec, Firewall: owned.NewFakeKernel(), Sets: owned.NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	hrec.Root = ""
	if d, err := h.Verify(ctx); err != nil || len(d) != 1 {
		t.Fatalf("htb after the root went: drift %v, err %v", d, err)
	}
	hrec.Log.Reset()
	if err := h.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hrec.Log.String(), "tc class replace dev veth-u parent 54: classid 54:") {
		t.Errorf("the read-rate class did not come back:\n%s", hrec.Log.String())
	}

	hrec.Root = "8001:" // someone's own root qdisc
	if d, _ := h.Verify(ctx); len(d) != 1 || !strings.Contains(d[0].Found, "8001: root") {
		t.Errorf("a foreign root: drift %v, want it named", d)
	}
}

// A composite backend reads back both of its halves.
func TestCompositeVerifiesBothHalves(t *testing.T) {
	ctx := context.Background()
	k, hk := owned.NewFakeKernel(), owned.NewFakeKernel()
	n, err := NewNetem(ctx, TCConfig{Dev: "veth-t", Instance: "tv3", Run: &acttest.Recorder{}, Firewall: k, Sets: k})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Instance: "tv4", Run: &acttest.Recorder{}, Firewall: hk, Sets: hk})
	if err != nil {
		t.Fatal(err)
	}
	c := &Composite{Delay: n, Rate: h}
	defer c.Close()
	s := State{Groups: []Group{
		{Name: "d", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: 5 * time.Millisecond},
		{Name: "r", Members: []netip.Addr{ip("10.0.0.3")}, ReadRate: 1 << 20},
	}}
	if err := c.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	k.FlushSets()
	hk.FlushHook()
	d, err := c.Verify(ctx)
	if err != nil || len(d) != 2 || d[0].Object != "member" || d[1].Object != "jump" {
		t.Errorf("drift %v, err %v; want the delay half's member and the rate half's jump", d, err)
	}
}
