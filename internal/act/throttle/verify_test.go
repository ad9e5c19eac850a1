package throttle

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// parseSave reads a chain out of real iptables-save output (iptables
// 1.8.9, nf_tables): its jumps from POSTROUTING and INPUT and its rules
// in the form they were installed in.
func TestParseSave(t *testing.T) {
	b, err := os.ReadFile("testdata/iptables-save-mangle.txt")
	if err != nil {
		t.Fatal(err)
	}
	in := parseSave(string(b), "SANQOS-q3260")
	if !in.Exists || in.Jumps["POSTROUTING"] != 1 || in.Jumps["INPUT"] != 1 || len(in.Rules) != 3 {
		t.Fatalf("parsed %+v", in)
	}
	want := "-A SANQOS-q3260 -p tcp -m tcp --sport 3260 -m set --match-set sanqos-q3260-r1 dst -j NFQUEUE --queue-num 3260 --queue-bypass"
	if in.Rules[0] != want || in.Rules[0] != (owner{name: "q3260"}).rule(NfqueueRules(State{Groups: []Group{{Name: "r1"}}}, 3260)[0]) {
		t.Errorf("first rule %q, want %q: the form we install", in.Rules[0], want)
	}
	if got := parseSave(string(b), "SANQOS-q1"); got.Exists || len(got.Jumps) != 0 || got.Rules != nil {
		t.Errorf("another instance's chain: %+v", got)
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
		tamper func(k *FakeKernel)
		want   []string // objects
	}{
		{"none", func(*FakeKernel) {}, nil},
		{"armed entry added by the kernel", func(k *FakeKernel) { _ = k.Add(ctx, "sanqos-q1-vg", ip("10.0.0.9")) }, nil},
		{"iptables -F POSTROUTING", (*FakeKernel).FlushHook, []string{"jump"}},
		{"nft flush ruleset", (*FakeKernel).FlushRuleset, []string{"jump", "chain"}},
		{"ipset flush", (*FakeKernel).FlushSets, []string{"member"}},
		{"ipset del", func(k *FakeKernel) { _ = k.Del(ctx, "sanqos-q1-vg", ip("10.0.0.3")) }, []string{"member"}},
		{"rule replaced", func(k *FakeKernel) {
			k.chains["SANQOS-q1"] = []string{"-A SANQOS-q1 -j ACCEPT"}
		}, []string{"rule"}},
		{"set destroyed", func(k *FakeKernel) {
			k.chains["SANQOS-q1"] = nil
			delete(k.sets, "sanqos-q1-vg")
		}, []string{"rule", "set"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := NewFakeKernel()
			r := newOwnedReconciler(k, k, "q1", 0)
			rules, sets := NfqueueRules(s, 1), wantSets(s)
			if err := r.apply(ctx, rules, sets); err != nil {
				t.Fatal(err)
			}
			installed := k.String()
			c.tamper(k)
			have, _ := k.List(ctx)
			drifts, err := r.verify(ctx, have)
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
			if err := r.apply(ctx, rules, sets); err != nil {
				t.Fatal(err)
			}
			if k.String() != installed {
				t.Errorf("after the next apply the kernel holds\n%s\nwant\n%s", k.String(), installed)
			}
			have, _ = k.List(ctx)
			if drifts, _ := r.verify(ctx, have); len(drifts) != 0 {
				t.Errorf("drift after the repair: %v", drifts)
			}
		})
	}
}

// Resync re-installs what Verify cannot see (a firewall without
// ChainReader): the next apply replaces the chain whole.
func TestResyncReplacesTheChain(t *testing.T) {
	ctx := context.Background()
	k := NewFakeKernel()
	r := newOwnedReconciler(struct{ Firewall }{k}, k, "q1", 0)
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.2")}, WriteDelay: time.Millisecond}}}
	if err := r.apply(ctx, NfqueueRules(s, 1), wantSets(s)); err != nil {
		t.Fatal(err)
	}
	installed := k.String()
	k.FlushRuleset()
	have, _ := k.List(ctx)
	if d, _ := r.verify(ctx, have); len(d) != 0 {
		t.Fatalf("a firewall that cannot be read back reported %v", d)
	}
	r.invalidate()
	if err := r.apply(ctx, NfqueueRules(s, 1), wantSets(s)); err != nil {
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
	rec := &recorder{}
	k := NewFakeKernel()
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
	rec.root = "" // tc qdisc del dev veth-t root
	rec.b.Reset()
	d, err := n.Verify(ctx)
	if err != nil || len(d) != 1 || d[0].Object != "qdisc" {
		t.Fatalf("after the root went: drift %v, err %v", d, err)
	}
	if got := rec.b.String(); rec.root != "53:" || !strings.Contains(got, "netem delay 5000us") {
		t.Errorf("the tree was not rebuilt with its leaves:\n%s", got)
	}

	hrec := &recorder{}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-u", Instance: "tv2", Run: hrec, Firewall: NewFakeKernel(), Sets: NewFakeKernel()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	hrec.root = ""
	if d, err := h.Verify(ctx); err != nil || len(d) != 1 {
		t.Fatalf("htb after the root went: drift %v, err %v", d, err)
	}
	hrec.b.Reset()
	if err := h.Apply(ctx, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hrec.b.String(), "tc class replace dev veth-u parent 54: classid 54:") {
		t.Errorf("the read-rate class did not come back:\n%s", hrec.b.String())
	}

	hrec.root = "8001:" // someone's own root qdisc
	if d, _ := h.Verify(ctx); len(d) != 1 || !strings.Contains(d[0].Found, "8001: root") {
		t.Errorf("a foreign root: drift %v, want it named", d)
	}
}

// A composite backend reads back both of its halves.
func TestCompositeVerifiesBothHalves(t *testing.T) {
	ctx := context.Background()
	k, hk := NewFakeKernel(), NewFakeKernel()
	n, err := NewNetem(ctx, TCConfig{Dev: "veth-t", Instance: "tv3", Run: &recorder{}, Firewall: k, Sets: k})
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHTB(ctx, TCConfig{Dev: "veth-t", Instance: "tv4", Run: &recorder{}, Firewall: hk, Sets: hk})
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
