package throttle

import (
	"slices"
	"strings"
	"testing"
)

// TestLiveVerifyRebuildsHTBRoot: `tc qdisc del dev D root` by someone
// else is found and the root put back on the real kernel; the next Apply
// restores the read-rate class.
func TestLiveVerifyRebuildsHTBRoot(t *testing.T) {
	l := newLab(t)
	b, err := NewHTB(t.Context(), TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := State{Groups: []Group{{Name: "tt", Members: []netipAddr{mustAddr(clientIP)}, ReadRate: 4e6}}}
	if err := b.Apply(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Verify(t.Context()); err != nil || len(d) != 0 {
		t.Fatalf("as installed: drift %v, err %v", d, err)
	}
	run(t, "ip", "netns", "exec", l.tns, "tc", "qdisc", "del", "dev", "sqtt0", "root")
	d, err := b.Verify(t.Context())
	if err != nil || len(d) != 1 || d[0].Object != "qdisc" {
		t.Fatalf("after tc qdisc del: drift %v, err %v", d, err)
	}
	if err := b.Apply(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	classes := run(t, "ip", "netns", "exec", l.tns, "tc", "class", "show", "dev", "sqtt0")
	if !strings.Contains(classes, "class htb 54:1 ") || !strings.Contains(classes, "class htb 54:10 ") {
		t.Errorf("classes after the repair:\n%s", classes)
	}
	if d, err := b.Verify(t.Context()); err != nil || len(d) != 0 {
		t.Errorf("after the repair: drift %v, err %v", d, err)
	}
}

// TestLiveVerifyRepairsWireCounters: the wire counters' chain, jumps,
// sets and clients come back at the next Verify after each flush.
func TestLiveVerifyRepairsWireCounters(t *testing.T) {
	l := newLab(t)
	w, err := OpenWire(t.Context(), WireConfig{Instance: "tt", Ports: []uint16{iscsi}, Firewall: &Iptables{Run: l.targetRunner},
		Handle: l.sets(t).Handle, NetNS: int(l.tnsH), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.SetClients([]netipAddr{mustAddr(clientIP)}); err != nil {
		t.Fatal(err)
	}
	if d, err := w.Verify(t.Context()); err != nil || len(d) != 0 {
		t.Fatalf("as installed: drift %v, err %v", d, err)
	}
	installed := l.ours(t)
	for _, c := range []struct {
		cmd  string
		want string // an object among the drifts
	}{
		{"iptables -w -t mangle -F POSTROUTING", "jump"},
		{"nft flush ruleset", "chain"},
		{"ipset flush", "member"},
	} {
		run(t, "ip", append([]string{"netns", "exec", l.tns}, strings.Fields(c.cmd)...)...)
		d, err := w.Verify(t.Context())
		if err != nil || !slices.ContainsFunc(d, func(x Drift) bool { return x.Object == c.want }) {
			t.Errorf("%s: drift %v, err %v; want a %s", c.cmd, d, err, c.want)
		}
		if got := l.ours(t); got != installed {
			t.Errorf("%s: after Verify the target holds\n%s\nwant\n%s", c.cmd, got, installed)
		}
		if d, err := w.Verify(t.Context()); err != nil || len(d) != 0 {
			t.Errorf("%s: after the repair: drift %v, err %v", c.cmd, d, err)
		}
		if got := run(t, "ip", "netns", "exec", l.tns, "ipset", "list", (owner{name: WireInstance("tt")}).set(wireSent)); !strings.Contains(got, "\n"+clientIP) {
			t.Errorf("%s: the client is not counted again:\n%s", c.cmd, got)
		}
	}
}
