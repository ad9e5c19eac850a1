package owned

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// Reconciler keeps our chain and sets equal to a desired state, touching
// the kernel only where the state changed. Rules and sets come named
// after the logical chain and the group's set (plan.SetName); the
// Reconciler installs them under its owner's names (see Owner).
//
// A failed step never removes what is in force: the chain is replaced in
// one iptables-restore transaction, so a failed replacement leaves the
// old rules; the Reconciler then forgets what it believed installed
// (kube-proxy's "needs full sync"), re-reads its sets at the next try and
// replaces the chain whole. Tries after a failure back off (retryMin
// doubling to retryMax) so that a state the kernel refuses costs a fork
// every few seconds, not every tick.
type Reconciler struct {
	fw   Firewall
	sets Sets
	own  Owner
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

func NewReconciler(fw Firewall, sets Sets) *Reconciler {
	return &Reconciler{fw: fw, sets: sets, now: time.Now, members: map[string]map[netip.Addr]bool{}}
}

func NewOwnedReconciler(fw Firewall, sets Sets, instance string, ns int) *Reconciler {
	r := NewReconciler(fw, sets)
	r.own, r.ns = Owner{Name: instance}, ns
	return r
}

// NewV6Reconciler is the reconciler of an instance's IPv6 half: fw is
// ip6tables, and its sets are of family inet6.
func NewV6Reconciler(fw Firewall, sets Sets, instance string, ns int) *Reconciler {
	r := NewOwnedReconciler(fw, sets, instance, ns)
	r.own.V6 = true
	return r
}

// Reset removes our chain and every set of ours: at start-up what a
// crashed run of this instance left, at Close what we installed.
func (r *Reconciler) Reset(ctx context.Context) error {
	r.synced = false
	r.ops++
	if err := r.fw.Remove(ctx, r.own.Chain()); err != nil {
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
func (r *Reconciler) ourSets(ctx context.Context) (map[string][]netip.Addr, error) {
	all, err := r.sets.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]netip.Addr{}
	for n, ms := range all {
		if r.own.Name == "" {
			if _, ok := SetOwner(n); ok {
				out[n] = ms // before ownership: every sanqos set
			}
			continue
		}
		if strings.HasPrefix(n, r.own.SetPrefix()) {
			out[n] = ms
		}
	}
	return out, nil
}

// SweepDead removes the chains and sets of instances that are provably
// dead (their lock is free), and of versions before ownership. It holds
// each dead instance's lock while it removes its objects. What it cannot
// remove it reports and leaves; it never touches a live instance's.
func (r *Reconciler) SweepDead(ctx context.Context) error {
	if r.own.Name == "" {
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
		if inst, ok := ChainOwner(c); ok && inst != r.own.Name {
			add(inst).chains = append(add(inst).chains, c)
		}
	}
	for n := range sets {
		if IsV6Set(n) != r.own.V6 {
			continue // the other half's reconciler sweeps it
		}
		if inst, ok := SetOwner(n); ok && inst != r.own.Name {
			add(inst).sets = append(add(inst).sets, n)
		}
	}
	var errs []error
	for _, inst := range sortedKeys(byOwner) {
		lk, dead := TryLockDead(r.ns, inst)
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
		lk.Release()
	}
	return errors.Join(errs...)
}

// Apply makes the kernel hold exactly rules and sets (logical names).
// Sets are created and filled before rules refer to them and destroyed
// only after no rule does. After a failure it returns at once, changing
// nothing, until the retry time.
func (r *Reconciler) Apply(ctx context.Context, rules []string, sets map[string][]netip.Addr) error {
	now := r.now()
	if r.lastErr != nil && now.Before(r.retryAt) {
		return fmt.Errorf("%w (the throttles in force stay; next try in %v)", r.lastErr, r.retryAt.Sub(now).Round(time.Millisecond))
	}
	own := make([]string, len(rules))
	for i, x := range rules {
		own[i] = r.own.Rule(x)
	}
	ownSets := make(map[string][]netip.Addr, len(sets))
	for n, ms := range sets {
		ownSets[r.own.Set(n)] = ms
	}
	err := r.Resync(ctx)
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

// Resync re-reads our sets after a failure; the chain's rules are then
// unknown, so the next step replaces them whole.
func (r *Reconciler) Resync(ctx context.Context) error {
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

func (r *Reconciler) applySteps(ctx context.Context, rules []string, sets map[string][]netip.Addr) error {
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
		if err := r.fw.Remove(ctx, r.own.Chain()); err != nil {
			return err
		}
		r.chain, r.rules = false, nil
	case len(rules) > 0 && (!r.chain || r.rules == nil || !slices.Equal(rules, r.rules)):
		r.ops++
		if err := r.fw.Replace(ctx, r.own.Chain(), rules); err != nil {
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

// Clean reports whether r believes the kernel holds what it installed
// last and that apply succeeded: giving it the same rules and sets again
// would change nothing. A reconciler told to re-read the kernel (after a
// failure, or on purpose) is not Clean.
func (r *Reconciler) Clean() bool { return r.synced && r.lastErr == nil }

// HasRules reports whether the chain holds rules of ours: a tc backend
// keeps its qdiscs while it does.
func (r *Reconciler) HasRules() bool { return len(r.rules) > 0 }
