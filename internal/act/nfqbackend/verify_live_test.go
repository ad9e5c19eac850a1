package nfqbackend

import (
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/act/qdisc"
	"github.com/sanqos/sanqos/internal/act/wire"
)

// TestLiveVerifyRebuildsHTBRoot: `tc qdisc del dev D root` by someone
// else is found and the root put back on the real kernel; the next Apply
// restores the read-rate class.
func TestLiveVerifyRebuildsHTBRoot(t *testing.T) {
	l := newLab(t)
	b, err := qdisc.NewHTB(t.Context(), qdisc.TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &owned.Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s := plan.State{Groups: []plan.Group{{Name: "tt", Members: []netipAddr{mustAddr(clientIP)}, ReadRate: 4e6}}}
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

// TestLiveWireInstallsNothing: the wire counters put no rule, chain or
// set in the kernel (they read its sockets' counters), so there is
// nothing on the packet path and nothing for Verify to repair.
func TestLiveWireInstallsNothing(t *testing.T) {
	l := newLab(t)
	w, err := wire.OpenWire(t.Context(), wire.WireConfig{Instance: "tt", Ports: []uint16{iscsi}, Firewall: &owned.Iptables{Run: l.targetRunner},
		Handle: l.sets(t).Handle, NetNS: int(l.tnsH), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.SetClients([]netipAddr{mustAddr(clientIP)}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Read(); err != nil {
		t.Fatal(err)
	}
	if got := l.ours(t); got != "" {
		t.Errorf("the wire counters installed\n%s\nwant nothing", got)
	}
	if d, err := w.Verify(t.Context()); err != nil || len(d) != 0 {
		t.Errorf("Verify: drift %v, err %v; want nothing", d, err)
	}
}

// TestLiveWireLookups: between dumps the counters look their known
// sockets up one at a time; an open connection's bytes grow there.
func TestLiveWireLookups(t *testing.T) {
	l := newLab(t)
	w, err := wire.OpenWire(t.Context(), wire.WireConfig{Instance: "tl", Ports: []uint16{iscsi}, Firewall: &owned.Iptables{Run: l.targetRunner},
		Handle: l.sets(t).Handle, NetNS: int(l.tnsH), Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	client := mustAddr(clientIP)
	if err := w.SetClients([]netipAddr{client}); err != nil {
		t.Fatal(err)
	}
	c := l.dial('u')
	defer c.Close()
	buf := make([]byte, 1<<20)
	var last uint64
	for i := range 3 { // a dump, then two lookups
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		got, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		if sent := got[client].Sent; sent < last+1<<20 {
			t.Fatalf("read %d: %d bytes counted, want at least %d (the open connection's)", i, sent, last+1<<20)
		} else {
			last = sent
		}
	}
}
