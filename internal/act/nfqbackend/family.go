package nfqbackend

import (
	"net/netip"
	"strings"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// byFamily splits rules and sets (logical names) into those of IPv4 and
// IPv6: every set keeps its IPv4 members in the IPv4 half (as before
// IPv6 existed); the IPv6 half has only the sets with IPv6 members, and
// the rules that match them.
func byFamily(rules []string, sets map[string][]netip.Addr) (rules4 []string, sets4 map[string][]netip.Addr, rules6 []string, sets6 map[string][]netip.Addr) {
	sets4, sets6 = map[string][]netip.Addr{}, map[string][]netip.Addr{}
	for n, ms := range sets {
		var v4, v6 []netip.Addr
		for _, m := range ms {
			if m = m.Unmap(); m.Is4() {
				v4 = append(v4, m)
			} else {
				v6 = append(v6, m)
			}
		}
		sets4[n] = v4
		if len(v6) > 0 {
			sets6[n] = v6
		}
	}
	// An arming rule goes to each half whose set of armed consumers is
	// not empty, where that half has the group's set (an IPv6 consumer
	// is armed only while the group has IPv6 members); each half that
	// arms asks for the INPUT jump.
	var arms4, arms6 bool
	for _, r := range rules {
		m := owned.RuleSetRef.FindStringSubmatch(r)
		switch {
		case r == owned.InputJump(owned.Chain):
		case m == nil:
			rules4 = append(rules4, r)
		case strings.HasSuffix(m[2], plan.ArmSuffix):
			group := strings.TrimSuffix(m[2], plan.ArmSuffix)
			if len(sets4[m[2]]) > 0 {
				rules4, arms4 = append(rules4, r), true
			}
			if _, ok := sets6[group]; ok && len(sets6[m[2]]) > 0 {
				rules6, arms6 = append(rules6, r), true
			} else {
				delete(sets6, m[2])
			}
		default:
			// A queueing rule only where its set can hold anyone: its
			// members, or armed consumers the kernel adds. A rule over
			// an empty set would still be on every packet's path.
			if len(sets4[m[2]]) > 0 || len(sets4[m[2]+plan.ArmSuffix]) > 0 {
				rules4 = append(rules4, r)
			}
			// (The IPv6 half has a group's set only with IPv6 members,
			// and arms only where it has the set.)
			if len(sets6[m[2]]) > 0 {
				rules6 = append(rules6, r)
			}
		}
	}
	if arms4 {
		rules4 = append([]string{owned.InputJump(owned.Chain)}, rules4...)
	}
	if arms6 {
		rules6 = append([]string{owned.InputJump(owned.Chain)}, rules6...)
	}
	return rules4, sets4, rules6, sets6
}
