package throttle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
)

// maxSetName is the kernel's limit on ipset names (IPSET_MAXNAMELEN - 1).
const maxSetName = 31

// SetName is the ipset of a group: SetPrefix and the group name reduced to
// characters iptables and ipset accept. Names that would be too long or
// had to be changed get a hash suffix so that two groups never share a set.
func SetName(group string) string {
	var b strings.Builder
	for _, r := range group {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	clean := b.String()
	if clean == group && len(SetPrefix)+len(clean) <= maxSetName {
		return SetPrefix + clean
	}
	sum := sha256.Sum256([]byte(group))
	h := hex.EncodeToString(sum[:4])
	room := maxSetName - len(SetPrefix) - len(h) - 1
	if len(clean) > room {
		clean = clean[:room]
	}
	return SetPrefix + clean + "-" + h
}

// portMatch is the iptables match for the target (source) ports.
func portMatch(ports []uint16) string {
	if len(ports) == 1 {
		return fmt.Sprintf("-p tcp -m tcp --sport %d", ports[0])
	}
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprint(p)
	}
	return "-p tcp -m multiport --sports " + strings.Join(ps, ",")
}

// sortedGroups returns the groups in name order, so that generated rules
// do not depend on the order the caller listed them in.
func sortedGroups(s State) []Group {
	gs := slices.Clone(s.Groups)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Name < gs[j].Name })
	return gs
}

// Validate rejects states the backends cannot program: duplicate group
// names, IPv6 members (the sets are hash:ip inet), negative delays.
func Validate(s State) error {
	seen := map[string]bool{}
	for _, g := range s.Groups {
		if g.Name == "" {
			return fmt.Errorf("group with no name")
		}
		if seen[SetName(g.Name)] {
			return fmt.Errorf("group %q listed twice", g.Name)
		}
		seen[SetName(g.Name)] = true
		if g.WriteDelay < 0 || g.ReadDelay < 0 {
			return fmt.Errorf("group %q: negative delay", g.Name)
		}
		for _, m := range g.Members {
			if !m.Is4() && !m.Is4In6() {
				return fmt.Errorf("group %q: member %s: only IPv4 is supported", g.Name, m)
			}
		}
	}
	return nil
}

// wantSets is the desired membership of every set: a group's members are
// in its set only while the group is active, so an idle group costs one
// failed set lookup per packet and nothing in user space.
func wantSets(s State) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, g := range s.Groups {
		var ms []netip.Addr
		if g.Active() {
			for _, m := range g.Members {
				ms = append(ms, m.Unmap())
			}
		}
		out[SetName(g.Name)] = ms
	}
	return out
}

// reconciler keeps our chain and sets equal to a desired state, touching
// the kernel only where the state changed. After a failed step it forgets
// what it believed was installed and rebuilds everything next time
// (kube-proxy's "needs full sync").
type reconciler struct {
	fw   Firewall
	sets Sets

	synced  bool
	rules   []string // installed chain rules; nil with chain absent
	chain   bool     // chain and jump are installed
	members map[string]map[netip.Addr]bool
	ops     int // kernel operations done, for tests and logs
}

func newReconciler(fw Firewall, sets Sets) *reconciler {
	return &reconciler{fw: fw, sets: sets}
}

// reset removes our chain and every set with our prefix, whoever made
// them: at start-up that clears what a crashed run left behind.
func (r *reconciler) reset(ctx context.Context) error {
	r.synced = false
	r.ops++
	if err := r.fw.Remove(ctx); err != nil {
		return err
	}
	r.chain, r.rules = false, nil
	have, err := r.sets.List(ctx)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(have))
	for n := range have {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r.ops++
		if err := r.sets.Destroy(ctx, n); err != nil {
			return err
		}
	}
	r.members = map[string]map[netip.Addr]bool{}
	r.synced = true
	return nil
}

// apply makes the kernel hold exactly rules and sets. Sets are created and
// filled before rules refer to them and destroyed only after no rule does.
func (r *reconciler) apply(ctx context.Context, rules []string, sets map[string][]netip.Addr) error {
	if !r.synced {
		if err := r.reset(ctx); err != nil {
			return err
		}
	}
	if err := r.applySteps(ctx, rules, sets); err != nil {
		r.synced = false
		return err
	}
	return nil
}

func (r *reconciler) applySteps(ctx context.Context, rules []string, sets map[string][]netip.Addr) error {
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		have, ok := r.members[n]
		if !ok {
			r.ops++
			if err := r.sets.Create(ctx, n); err != nil {
				return err
			}
			have = map[netip.Addr]bool{}
			r.members[n] = have
		}
		want := map[netip.Addr]bool{}
		for _, a := range sets[n] {
			want[a] = true
		}
		for _, a := range sortedAddrs(want) {
			if !have[a] {
				r.ops++
				if err := r.sets.Add(ctx, n, a); err != nil {
					return err
				}
				have[a] = true
			}
		}
		for _, a := range sortedAddrs(have) {
			if !want[a] {
				r.ops++
				if err := r.sets.Del(ctx, n, a); err != nil {
					return err
				}
				delete(have, a)
			}
		}
	}
	switch {
	case len(rules) == 0 && r.chain:
		r.ops++
		if err := r.fw.Remove(ctx); err != nil {
			return err
		}
		r.chain, r.rules = false, nil
	case len(rules) > 0 && (!r.chain || !slices.Equal(rules, r.rules)):
		r.ops++
		if err := r.fw.Replace(ctx, rules); err != nil {
			return err
		}
		r.chain, r.rules = true, slices.Clone(rules)
	}
	for _, n := range sortedKeys(r.members) {
		if _, ok := sets[n]; !ok {
			r.ops++
			if err := r.sets.Destroy(ctx, n); err != nil {
				return err
			}
			delete(r.members, n)
		}
	}
	return nil
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
