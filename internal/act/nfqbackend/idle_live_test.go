//go:build linux

package nfqbackend

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/act/qdisc"
)

// onPath lists every sanqos object a packet of the target namespace
// could pass: rules and chains of ours in the mangle, filter and raw
// tables of both families (iptables-save, and nft's view of the same
// hooks), and every qdisc and filter on the device and its egress and
// ingress hooks. Objects that were there before any backend (the
// device's default qdisc) are in base and left out.
func (l *lab) onPath(t *testing.T, base []string) []string {
	t.Helper()
	var out []string
	add := func(what string, lines string, keep func(string) bool) {
		for _, ln := range strings.Split(lines, "\n") {
			ln = strings.TrimSpace(ln)
			if ln != "" && keep(ln) && !slices.Contains(base, what+": "+ln) {
				out = append(out, what+": "+ln)
			}
		}
	}
	ours := func(ln string) bool { return strings.Contains(strings.ToLower(ln), "sanqos") }
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		for _, table := range []string{"mangle", "filter", "raw"} {
			got, err := l.targetRunner.Run(t.Context(), "", save, "-t", table)
			if err != nil {
				t.Fatalf("%s -t %s: %v", save, table, err)
			}
			add(save+" "+table, got, ours)
		}
	}
	if _, err := exec.LookPath("nft"); err == nil {
		got, err := l.targetRunner.Run(t.Context(), "", "nft", "list", "ruleset")
		if err != nil {
			t.Fatalf("nft list ruleset: %v", err)
		}
		add("nft", got, ours)
	}
	all := func(string) bool { return true }
	for _, c := range [][]string{
		{"qdisc", "show", "dev", "sqtt0"},
		{"class", "show", "dev", "sqtt0"},
		{"filter", "show", "dev", "sqtt0", "egress"},
		{"filter", "show", "dev", "sqtt0", "ingress"},
		{"filter", "show", "dev", "sqtt0"},
	} {
		got, err := l.targetRunner.Run(t.Context(), "", "tc", c...)
		if err != nil && !strings.Contains(got, "clsact") {
			// "filter show ... egress" fails without clsact: nothing there.
			continue
		}
		add("tc "+strings.Join(c[:2], " "), got, all)
	}
	return out
}

// TestLiveIdlePathAudit (issue 35): for each backend, with a consumer
// known and nobody throttled or armed, no packet of the namespace passes
// a sanqos rule, chain, qdisc or filter; the first throttle installs
// them in one Apply, and ending it removes them again (after the grace
// that lets held packets leave); Close leaves nothing either.
func TestLiveIdlePathAudit(t *testing.T) {
	const grace = 200 * time.Millisecond
	member := []netipAddr{mustAddr(clientIP)}
	idle := plan.State{Groups: []plan.Group{{Name: "tt", Members: member}}}
	delayed := plan.State{Groups: []plan.Group{{Name: "tt", Members: member, WriteDelay: 5 * time.Millisecond, ReadDelay: 5 * time.Millisecond}}}
	capped := plan.State{Groups: []plan.Group{{Name: "tt", Members: member, ReadRate: 1 << 20}}}
	for _, c := range []struct {
		name  string
		busy  plan.State
		start func(t *testing.T, l *lab) (backend, error)
	}{
		{"nfqueue", delayed, func(t *testing.T, l *lab) (backend, error) { return l.backend(t), nil }},
		{"netem", delayed, func(t *testing.T, l *lab) (backend, error) {
			return qdisc.NewNetem(t.Context(), qdisc.TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &owned.Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog(), IdleGrace: grace})
		}},
		{"htb", capped, func(t *testing.T, l *lab) (backend, error) {
			return qdisc.NewHTB(t.Context(), qdisc.TCConfig{Dev: "sqtt0", Run: l.targetRunner, Firewall: &owned.Iptables{Run: l.targetRunner}, Sets: l.sets(t), Logger: quietLog(), IdleGrace: grace})
		}},
		{"edt", delayed, func(t *testing.T, l *lab) (backend, error) {
			e, err := edt.New("/run/netns/"+l.tns, "sqtt0")
			if err != nil {
				return nil, err
			}
			return qdisc.NewEDT(e, time.Second, grace, quietLog()), nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLab(t)
			base := l.onPath(t, nil)
			b, err := c.start(t, l)
			if err != nil {
				if c.name == "netem" || c.name == "edt" {
					t.Skipf("this kernel cannot run %s here: %v", c.name, err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			ctx := context.Background()
			if got := l.onPath(t, base); len(got) > 0 {
				t.Errorf("started, nothing applied: on the path\n%s", strings.Join(got, "\n"))
			}
			if err := b.Apply(ctx, idle); err != nil {
				t.Fatal(err)
			}
			if got := l.onPath(t, base); len(got) > 0 {
				t.Errorf("a consumer known, nobody throttled: on the path\n%s", strings.Join(got, "\n"))
			}
			if err := b.Apply(ctx, c.busy); err != nil {
				t.Fatal(err)
			}
			busy := l.onPath(t, base)
			if len(busy) == 0 {
				t.Fatal("throttled: nothing installed after the Apply")
			}
			t.Logf("throttled: %d objects on the path", len(busy))
			if err := b.Apply(ctx, idle); err != nil {
				t.Fatal(err)
			}
			var left []string
			for end := time.Now().Add(grace + 3*time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if left = l.onPath(t, base); len(left) == 0 {
					break
				}
			}
			if len(left) > 0 {
				t.Errorf("idle again: still on the path\n%s", strings.Join(left, "\n"))
			}
			if v, ok := b.(interface {
				Verify(context.Context) ([]owned.Drift, error)
			}); ok { // throttle.Verifier
				if d, err := v.Verify(ctx); err != nil || len(d) != 0 {
					t.Errorf("Verify while idle: drift %v, err %v; want nothing to repair", d, err)
				}
				if got := l.onPath(t, base); len(got) > 0 {
					t.Errorf("Verify while idle installed\n%s", strings.Join(got, "\n"))
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got := l.onPath(t, base); len(got) > 0 {
				t.Errorf("after Close: %s", fmt.Sprint(got))
			}
		})
	}
}
