package throttle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
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
	return "-p tcp -m multiport --sports " + portList(ports)
}

// portList renders ports as a multiport match lists them: "3260,860".
func portList(ports []uint16) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprint(p)
	}
	return strings.Join(ps, ",")
}

// sortedGroups returns the groups in name order, so that generated rules
// do not depend on the order the caller listed them in.
func sortedGroups(s State) []Group {
	gs := slices.Clone(s.Groups)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Name < gs[j].Name })
	return gs
}

// validateShape rejects states no backend can make sense of.
func validateShape(s State) error {
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
	}
	return nil
}

// Refused says which parts of a state a backend left out; the rest of
// the state is in force. Apply returns it (wrapped, errors.As finds it)
// when it programmed the state without them.
type Refused struct{ Reasons []string }

func (r *Refused) Error() string {
	return "not throttled (the rest is): " + strings.Join(r.Reasons, "; ")
}

// Split returns s without what the IPv4-only backends (netem, htb) cannot
// program, one consumer or group at a time, and says what it left out
// (nil: nothing): IPv6 members, and groups with more ports than one
// iptables multiport match takes. Arming is left out without a word:
// only nfqueue and edt arm (see arm.go). The nfqueue backend keeps IPv6 members
// when ip6tables works.
func Split(s State) (State, *Refused) {
	out, why := split(s, false)
	return withoutArming(out), why
}

// split is Split; with v6 it keeps IPv6 members (the nfqueue backend
// programs them with ip6tables and inet6 sets).
func split(s State, v6 bool) (State, *Refused) {
	var out State
	var why []string
	for _, g := range s.Groups {
		if err := ValidatePorts(g.Ports); err != nil {
			why = append(why, fmt.Sprintf("group %q: %v", g.Name, err))
			continue
		}
		var ms []netip.Addr
		for _, m := range g.Members {
			if m.Unmap().Is4() || v6 {
				ms = append(ms, m)
				continue
			}
			why = append(why, fmt.Sprintf("group %q: consumer %s: IPv6 consumers cannot be throttled by this backend (netem, htb and nfqueue without a working ip6tables program IPv4 only); use the nfqueue backend with ip6tables, or serve it over IPv4", g.Name, m))
		}
		if len(ms) != len(g.Members) {
			g.Members = ms
		}
		out.Groups = append(out.Groups, g)
	}
	if len(why) == 0 {
		return s, nil
	}
	return out, &Refused{Reasons: why}
}

// wantSets is the desired membership of every set: a group's members are
// in its set only while the group is active, so an idle group costs one
// failed set lookup per packet and nothing in user space; a group that
// arms has its armed consumers in a set of their own (see arm.go).
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
	armSets(s, out)
	return out
}

// reconciler keeps our chain and sets equal to a desired state, touching
// the kernel only where the state changed. Rules and sets come named
// after the logical chain and SetName; the reconciler installs them under
// its owner's names (see owner).
//
// A failed step never removes what is in force: the chain is replaced in
// one iptables-restore transaction, so a failed replacement leaves the
// old rules; the reconciler then forgets what it believed installed
// (kube-proxy's "needs full sync"), re-reads its sets at the next try and
// replaces the chain whole. Tries after a failure back off (retryMin
// doubling to retryMax) so that a state the kernel refuses costs a fork
// every few seconds, not every tick.
type reconciler struct {
	fw   Firewall
	sets Sets
	own  owner
	ns   int // network namespace of the instance locks (0: ours)
	now  func() time.Time

	synced  bool     // what we believe installed is what the kernel holds
	rules   []string // installed chain rules (owner's names); nil with chain absent
	chain   bool     // chain and jump are installed
	members map[string]map[netip.Addr]bool
	ops     int // kernel operations done, for tests and logs

	lastErr error     // of the last failed apply
	retryAt time.Time // no kernel change before this after a failure
	backoff time.Duration
}

// Retry bounds after a failed apply: the first retry after retryMin, each
// later one after twice the wait before, at most retryMax.
const (
	retryMin = 200 * time.Millisecond
	retryMax = 10 * time.Second
)

func newReconciler(fw Firewall, sets Sets) *reconciler {
	return &reconciler{fw: fw, sets: sets, now: time.Now, members: map[string]map[netip.Addr]bool{}}
}

func newOwnedReconciler(fw Firewall, sets Sets, instance string, ns int) *reconciler {
	r := newReconciler(fw, sets)
	r.own, r.ns = owner{name: instance}, ns
	return r
}

// newV6Reconciler is the reconciler of an instance's IPv6 half: fw is
// ip6tables, and its sets are of family inet6.
func newV6Reconciler(fw Firewall, sets Sets, instance string, ns int) *reconciler {
	r := newOwnedReconciler(fw, sets, instance, ns)
	r.own.v6 = true
	return r
}

// reset removes our chain and every set of ours: at start-up what a
// crashed run of this instance left, at Close what we installed.
func (r *reconciler) reset(ctx context.Context) error {
	r.synced = false
	r.ops++
	if err := r.fw.Remove(ctx, r.own.chain()); err != nil {
		return err
	}
	r.chain, r.rules = false, nil
	have, err := r.ourSets(ctx)
	if err != nil {
		return err
	}
	for _, n := range sortedKeys(have) {
		r.ops++
		if err := r.sets.Destroy(ctx, n); err != nil {
			return err
		}
	}
	r.members = map[string]map[netip.Addr]bool{}
	r.synced = true
	r.lastErr, r.retryAt, r.backoff = nil, time.Time{}, 0
	return nil
}

// ourSets lists the sets with our owner's prefix.
func (r *reconciler) ourSets(ctx context.Context) (map[string][]netip.Addr, error) {
	all, err := r.sets.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]netip.Addr{}
	for n, ms := range all {
		if r.own.name == "" {
			if _, ok := setOwner(n); ok {
				out[n] = ms // before ownership: every sanqos set
			}
			continue
		}
		if strings.HasPrefix(n, r.own.setPrefix()) {
			out[n] = ms
		}
	}
	return out, nil
}

// sweepDead removes the chains and sets of instances that are provably
// dead (their lock is free), and of versions before ownership. It holds
// each dead instance's lock while it removes its objects. What it cannot
// remove it reports and leaves; it never touches a live instance's.
func (r *reconciler) sweepDead(ctx context.Context) error {
	if r.own.name == "" {
		return nil
	}
	chains, err := r.fw.Chains(ctx)
	if err != nil {
		return err
	}
	sets, err := r.sets.List(ctx)
	if err != nil {
		return err
	}
	byOwner := map[string]*struct {
		chains, sets []string
	}{}
	add := func(inst string) *struct{ chains, sets []string } {
		if byOwner[inst] == nil {
			byOwner[inst] = &struct{ chains, sets []string }{}
		}
		return byOwner[inst]
	}
	for _, c := range chains {
		if inst, ok := chainOwner(c); ok && inst != r.own.name {
			add(inst).chains = append(add(inst).chains, c)
		}
	}
	for n := range sets {
		if isV6Set(n) != r.own.v6 {
			continue // the other half's reconciler sweeps it
		}
		if inst, ok := setOwner(n); ok && inst != r.own.name {
			add(inst).sets = append(add(inst).sets, n)
		}
	}
	var errs []error
	for _, inst := range sortedKeys(byOwner) {
		lk, dead := tryLockDead(r.ns, inst)
		if !dead {
			continue // a live instance: not ours to touch
		}
		o := byOwner[inst]
		slices.Sort(o.chains)
		slices.Sort(o.sets)
		for _, c := range o.chains {
			r.ops++
			if err := r.fw.Remove(ctx, c); err != nil {
				errs = append(errs, fmt.Errorf("removing chain %s of dead instance %q: %w", c, inst, err))
			}
		}
		for _, n := range o.sets {
			r.ops++
			if err := r.sets.Destroy(ctx, n); err != nil {
				errs = append(errs, fmt.Errorf("removing ipset %s of dead instance %q: %w", n, inst, err))
			}
		}
		lk.release()
	}
	return errors.Join(errs...)
}

// apply makes the kernel hold exactly rules and sets (logical names).
// Sets are created and filled before rules refer to them and destroyed
// only after no rule does. After a failure it returns at once, changing
// nothing, until the retry time.
func (r *reconciler) apply(ctx context.Context, rules []string, sets map[string][]netip.Addr) error {
	now := r.now()
	if r.lastErr != nil && now.Before(r.retryAt) {
		return fmt.Errorf("%w (the throttles in force stay; next try in %v)", r.lastErr, r.retryAt.Sub(now).Round(time.Millisecond))
	}
	own := make([]string, len(rules))
	for i, x := range rules {
		own[i] = r.own.rule(x)
	}
	ownSets := make(map[string][]netip.Addr, len(sets))
	for n, ms := range sets {
		ownSets[r.own.set(n)] = ms
	}
	err := r.resync(ctx)
	if err == nil {
		err = r.applySteps(ctx, own, ownSets)
	}
	if err != nil {
		r.synced = false
		r.backoff = min(max(2*r.backoff, retryMin), retryMax)
		r.lastErr, r.retryAt = err, now.Add(r.backoff)
		return fmt.Errorf("%w (the throttles in force stay; next try in %v)", err, r.backoff)
	}
	r.lastErr, r.backoff = nil, 0
	return nil
}

// resync re-reads our sets after a failure; the chain's rules are then
// unknown, so the next step replaces them whole.
func (r *reconciler) resync(ctx context.Context) error {
	if r.synced {
		return nil
	}
	have, err := r.ourSets(ctx)
	if err != nil {
		return err
	}
	r.members = map[string]map[netip.Addr]bool{}
	for n, ms := range have {
		r.members[n] = toSet(ms)
	}
	r.rules = nil
	r.chain = true // unknown: remove or replace it
	r.synced = true
	return nil
}

func toSet(as []netip.Addr) map[netip.Addr]bool {
	m := make(map[netip.Addr]bool, len(as))
	for _, a := range as {
		m[a.Unmap()] = true
	}
	return m
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
		if err := r.fw.Remove(ctx, r.own.chain()); err != nil {
			return err
		}
		r.chain, r.rules = false, nil
	case len(rules) > 0 && (!r.chain || r.rules == nil || !slices.Equal(rules, r.rules)):
		r.ops++
		if err := r.fw.Replace(ctx, r.own.chain(), rules); err != nil {
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
