package nfqbackend

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// TestArmingPlan: a group that arms a consumer installs, beside its queue
// rule, a set of the armed consumers and one rule per port split that
// adds an armed consumer to the group's set on a data segment it sends (longer than the split and the
// headers), the INPUT jump the rules need, and the armed delay in the
// write direction of the delay table; the consumer is not in the set
// until the kernel puts it there, and a member keeps its own delay.
// Disarming takes the rules and the jump away.
func TestArmingPlan(t *testing.T) {
	ctx := context.Background()
	k := owned.NewFakeKernel()
	rec := owned.NewReconciler(k, k)
	ms := members{small: map[uint16]int{2049: 256}, def: 128}
	now := time.Unix(1000, 0)
	a, m := ip("10.0.0.2"), ip("10.0.0.3")
	armed := plan.State{Groups: []plan.Group{{Name: "vg", Ports: []uint16{3260, 2049}, Members: []netip.Addr{m}, WriteDelay: 30 * time.Millisecond,
		Armed: []netip.Addr{a, m}, ArmedDelay: 12 * time.Millisecond}}}

	tab := ms.update(armed, now)
	if got := tab[a]; got.write != 12*time.Millisecond || got.read != 0 {
		t.Errorf("armed consumer's delays %+v, want write 12ms only", got)
	}
	if got := tab[m]; got.write != 30*time.Millisecond {
		t.Errorf("member's write delay %v, want its own 30ms", got.write)
	}
	if !ms.keep(a, now) {
		t.Error("the packet path would forget an armed consumer's flows")
	}
	rules, sets, _ := ms.plan(now, 1, func(netip.Addr) bool { return true })
	want := []string{
		"-A INPUT -j SANQOS",
		"-A SANQOS -p tcp -m multiport --dports 3260 -m length --length 229:65535 -m set --match-set sanqos-vg:arm src -j SET --add-set sanqos-vg src --timeout 1",
		"-A SANQOS -p tcp -m multiport --dports 2049 -m length --length 357:65535 -m set --match-set sanqos-vg:arm src -j SET --add-set sanqos-vg src --timeout 1",
	}
	for _, w := range want {
		if !slices.Contains(rules, w) {
			t.Errorf("no rule %q in\n%s", w, strings.Join(rules, "\n"))
		}
	}
	if slices.Contains(sets["sanqos-vg"], a) {
		t.Errorf("the armed consumer is in the set before it wrote: %v", sets)
	}
	if got := sets["sanqos-vg:arm"]; !slices.Equal(got, []netip.Addr{a, m}) {
		t.Errorf("the set of armed consumers holds %v, want %v %v", got, a, m)
	}
	if err := rec.Apply(ctx, rules, sets); err != nil {
		t.Fatalf("the fake kernel refused the arming rules: %v", err)
	}

	disarmed := plan.State{Groups: []plan.Group{{Name: "vg", Ports: []uint16{3260}, Members: []netip.Addr{m}, WriteDelay: 30 * time.Millisecond}}}
	tab = ms.update(disarmed, now)
	if _, ok := tab[a]; ok || ms.keep(a, now) {
		t.Errorf("a disarmed consumer still has delays %v or is kept", tab[a])
	}
	rules, _, _ = ms.plan(now, 1, func(netip.Addr) bool { return true })
	for _, r := range rules {
		if strings.Contains(r, "INPUT") || strings.Contains(r, "--add-set") {
			t.Errorf("disarmed state keeps rule %q", r)
		}
	}
	// No delay to arm with: nothing armed.
	tab = ms.update(plan.State{Groups: []plan.Group{{Name: "vg", Armed: []netip.Addr{a}}}}, now)
	if rules, _, _ := ms.plan(now, 1, func(netip.Addr) bool { return true }); len(armRules(ms.last, ms.small, ms.def)) != 0 || tab[a].write != 0 {
		t.Errorf("armed without a delay: rules %q, delays %+v", rules, tab[a])
	}
}

// TestArmingByFamily: an arming rule goes to its address's half, and
// each half that arms gets the INPUT jump; an IPv6 consumer is armed only
// while its group's set exists in the IPv6 half.
func TestArmingByFamily(t *testing.T) {
	a4, a6, m6 := ip("10.0.0.2"), ip("fd00::2"), ip("fd00::3")
	tests := []struct {
		name         string
		members      []netip.Addr
		armed        []netip.Addr
		want4, want6 int // arming rules in each half
	}{
		{"v4 only", nil, []netip.Addr{a4}, 1, 0},
		{"v6 without a v6 set", nil, []netip.Addr{a6}, 0, 0},
		{"v6 with a v6 member", []netip.Addr{m6}, []netip.Addr{a4, a6}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := plan.State{Groups: []plan.Group{{Name: "vg", Members: tt.members, WriteDelay: time.Millisecond, Armed: tt.armed, ArmedDelay: time.Millisecond}}}
			rules := append(NfqueueRules(s, 1), armRules(s, nil, 128)...)
			r4, _, r6, _ := byFamily(rules, plan.WantSets(s))
			for _, c := range []struct {
				half  string
				rules []string
				want  int
			}{{"IPv4", r4, tt.want4}, {"IPv6", r6, tt.want6}} {
				arms := 0
				for _, r := range c.rules {
					if strings.Contains(r, "--add-set") {
						arms++
					}
				}
				if jump := slices.Contains(c.rules, owned.InputJump(owned.Chain)); arms != c.want || jump != (c.want > 0) {
					t.Errorf("%s half: %d arming rules (want %d), INPUT jump %v:\n%s", c.half, arms, c.want, jump, strings.Join(c.rules, "\n"))
				}
			}
		})
	}
}

// Arming many consumers costs one rule per port split, not one per
// consumer: the armed addresses are a set the rule matches (audit N10:
// every INPUT packet to a storage port walked one rule per armed
// address).
func TestArmingRulesDoNotGrowWithTheArmed(t *testing.T) {
	var armed []netip.Addr
	for i := range 200 {
		armed = append(armed, netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(1 + i%250)}))
	}
	s := plan.State{Groups: []plan.Group{{Name: "vg", Ports: []uint16{3260}, WriteDelay: 0, Armed: armed, ArmedDelay: 5 * time.Millisecond}}}
	rules := armRules(s, nil, 128)
	if len(rules) != 2 { // the INPUT jump and one SET rule
		t.Fatalf("%d arming rules for %d armed consumers, want 2:\n%s", len(rules), len(armed), strings.Join(rules[:min(len(rules), 4)], "\n"))
	}
	var holds bool
	for _, ms := range plan.WantSets(s) {
		holds = holds || len(ms) == len(armed)
	}
	if !holds {
		t.Errorf("no set holds the %d armed consumers: %v", len(armed), plan.WantSets(s))
	}
}
