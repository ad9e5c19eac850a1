package throttle

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestArmingPlan: a group that arms a consumer installs, beside its queue
// rule, one rule per armed address and port split that adds it to the
// group's set on a data segment it sends (longer than the split and the
// headers), the INPUT jump the rules need, and the armed delay in the
// write direction of the delay table; the consumer is not in the set
// until the kernel puts it there, and a member keeps its own delay.
// Disarming takes the rules and the jump away.
func TestArmingPlan(t *testing.T) {
	ctx := context.Background()
	k := NewFakeKernel()
	rec := newReconciler(k, k)
	ms := members{small: map[uint16]int{2049: 256}, def: 128}
	now := time.Unix(1000, 0)
	a, m := ip("10.0.0.2"), ip("10.0.0.3")
	armed := State{Groups: []Group{{Name: "vg", Ports: []uint16{3260, 2049}, Members: []netip.Addr{m}, WriteDelay: 30 * time.Millisecond,
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
		"-A SANQOS -s 10.0.0.2/32 -p tcp -m multiport --dports 3260 -m length --length 229:65535 -j SET --add-set sanqos-vg src --timeout 1",
		"-A SANQOS -s 10.0.0.3/32 -p tcp -m multiport --dports 3260 -m length --length 229:65535 -j SET --add-set sanqos-vg src --timeout 1",
		"-A SANQOS -s 10.0.0.2/32 -p tcp -m multiport --dports 2049 -m length --length 357:65535 -j SET --add-set sanqos-vg src --timeout 1",
		"-A SANQOS -s 10.0.0.3/32 -p tcp -m multiport --dports 2049 -m length --length 357:65535 -j SET --add-set sanqos-vg src --timeout 1",
	}
	for _, w := range want {
		if !slices.Contains(rules, w) {
			t.Errorf("no rule %q in\n%s", w, strings.Join(rules, "\n"))
		}
	}
	if slices.Contains(sets["sanqos-vg"], a) {
		t.Errorf("the armed consumer is in the set before it wrote: %v", sets)
	}
	if err := rec.apply(ctx, rules, sets); err != nil {
		t.Fatalf("the fake kernel refused the arming rules: %v", err)
	}

	disarmed := State{Groups: []Group{{Name: "vg", Ports: []uint16{3260}, Members: []netip.Addr{m}, WriteDelay: 30 * time.Millisecond}}}
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
	tab = ms.update(State{Groups: []Group{{Name: "vg", Armed: []netip.Addr{a}}}}, now)
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
			s := State{Groups: []Group{{Name: "vg", Members: tt.members, WriteDelay: time.Millisecond, Armed: tt.armed, ArmedDelay: time.Millisecond}}}
			rules := append(NfqueueRules(s, 1), armRules(s, nil, 128)...)
			r4, _, r6, _ := byFamily(rules, wantSets(s))
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
				if jump := slices.Contains(c.rules, inputJump(Chain)); arms != c.want || jump != (c.want > 0) {
					t.Errorf("%s half: %d arming rules (want %d), INPUT jump %v:\n%s", c.half, arms, c.want, jump, strings.Join(c.rules, "\n"))
				}
			}
		})
	}
}
