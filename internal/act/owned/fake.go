package owned

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// FakeKernel is an in-memory Firewall and Sets that enforces the kernel's
// rules that matter for ordering: a rule may only name an existing set, a
// set in use cannot be destroyed, an existing set or member cannot be
// created twice. Its state renders as text for golden comparisons.
type FakeKernel struct {
	mu     sync.Mutex
	jumps  map[string]int
	inputs map[string]bool     // chains INPUT jumps to (arming)
	chains map[string][]string // chain name → rules
	sets   map[string]map[netip.Addr]bool
	Ops    int // number of mutating calls, to prove idempotence
	// Foreign holds sets of other owners that must never be touched.
	Foreign map[string]bool
	// FailReplace, when set, makes every Replace fail with it (as
	// iptables-restore refusing a rule), leaving the chain as it was.
	FailReplace error
}

// NewFakeKernel returns an empty fake kernel.
func NewFakeKernel() *FakeKernel {
	return &FakeKernel{sets: map[string]map[netip.Addr]bool{}, Foreign: map[string]bool{},
		jumps: map[string]int{}, inputs: map[string]bool{}, chains: map[string][]string{}}
}

var setRef = regexp.MustCompile(`--(?:match|add)-set (\S+) `)

func (k *FakeKernel) Replace(_ context.Context, chain string, rules []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.FailReplace != nil {
		return fmt.Errorf("installing chain %s: %w", chain, k.FailReplace)
	}
	from, rules := splitJumps(chain, rules)
	for _, r := range rules {
		if !strings.HasPrefix(r, "-A "+chain+" ") {
			return fmt.Errorf("rule %q is not in chain %s", r, chain)
		}
		for _, m := range setRef.FindAllStringSubmatch(r, -1) {
			if _, ok := k.sets[m[1]]; !ok {
				return fmt.Errorf("rule %q: set %s does not exist", r, m[1])
			}
		}
	}
	k.Ops++
	k.chains[chain] = append([]string{}, rules...)
	if k.jumps[chain] == 0 {
		k.jumps[chain] = 1
	}
	if slices.Contains(from, "INPUT") {
		k.inputs[chain] = true
	} else {
		delete(k.inputs, chain)
	}
	return nil
}

func (k *FakeKernel) Remove(_ context.Context, chain string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.chains[chain]; ok || k.jumps[chain] > 0 {
		k.Ops++
	}
	delete(k.jumps, chain)
	delete(k.inputs, chain)
	delete(k.chains, chain)
	return nil
}

// Installed reads chain back, like iptables-save (see ChainReader).
func (k *FakeKernel) Installed(_ context.Context, chain string) (Installed, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	rules, ok := k.chains[chain]
	in := Installed{Exists: ok, Jumps: map[string]int{hook: k.jumps[chain]}, Rules: slices.Clone(rules)}
	if k.inputs[chain] {
		in.Jumps["INPUT"] = 1
	}
	return in, nil
}

func (k *FakeKernel) Chains(context.Context) ([]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for c := range k.chains {
		if strings.HasPrefix(c, Chain) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out, nil
}

// FlushHook removes every jump to our chains, as another tool's
// `iptables -t mangle -F POSTROUTING` (a host firewall reload) does.
func (k *FakeKernel) FlushHook() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.jumps = map[string]int{}
}

// FlushRuleset removes every chain and jump, as `nft flush ruleset`
// does; the ipsets stay (they are not nftables objects).
func (k *FakeKernel) FlushRuleset() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.jumps, k.inputs, k.chains = map[string]int{}, map[string]bool{}, map[string][]string{}
}

// FlushSets empties every set, as `ipset flush` does.
func (k *FakeKernel) FlushSets() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for n := range k.sets {
		k.sets[n] = map[netip.Addr]bool{}
	}
}

// SetChain gives chain rules behind the reconciler's back, as another
// tool editing our chain would; jumps and sets stay.
func (k *FakeKernel) SetChain(chain string, rules []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.chains[chain] = rules
}

// PutSet makes set name hold members behind the reconciler's back (a set
// of another tool, with Foreign).
func (k *FakeKernel) PutSet(name string, members ...netip.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sets[name] = map[netip.Addr]bool{}
	for _, m := range members {
		k.sets[name][m] = true
	}
}

// DropSet destroys set name behind the reconciler's back.
func (k *FakeKernel) DropSet(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.sets, name)
}

// HasSet reports whether set name exists, ours or not.
func (k *FakeKernel) HasSet(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.sets[name]
	return ok
}

// Crash leaves state as a killed daemon of a version before ownership
// would: twice-jumped chain and a stale set, to test start-up cleanup.
func (k *FakeKernel) Crash(rules []string, sets map[string][]netip.Addr) {
	k.CrashAs(Chain, rules, sets)
}

// CrashAs is Crash with the chain named.
func (k *FakeKernel) CrashAs(chain string, rules []string, sets map[string][]netip.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.jumps[chain] = 2
	k.chains[chain] = append([]string{}, rules...)
	for n, ms := range sets {
		k.sets[n] = map[netip.Addr]bool{}
		for _, m := range ms {
			k.sets[n][m] = true
		}
	}
}

func (k *FakeKernel) List(context.Context) (map[string][]netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string][]netip.Addr{}
	for n, ms := range k.sets {
		if strings.HasPrefix(n, SetPrefix) {
			out[n] = sortedAddrs(ms)
		}
	}
	return out, nil
}

func (k *FakeKernel) Create(_ context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.sets[name]; ok {
		return fmt.Errorf("set %s exists", name)
	}
	k.Ops++
	k.sets[name] = map[netip.Addr]bool{}
	return nil
}

func (k *FakeKernel) Add(_ context.Context, name string, ip netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.sets[name]
	if !ok {
		return fmt.Errorf("set %s does not exist", name)
	}
	if s[ip] {
		return fmt.Errorf("%s already in %s", ip, name)
	}
	k.Ops++
	s[ip] = true
	return nil
}

func (k *FakeKernel) Del(_ context.Context, name string, ip netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.sets[name]
	if !ok || !s[ip] {
		return fmt.Errorf("%s not in %s", ip, name)
	}
	k.Ops++
	delete(s, ip)
	return nil
}

func (k *FakeKernel) Destroy(_ context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.Foreign[name] {
		return fmt.Errorf("destroyed foreign set %s", name)
	}
	if _, ok := k.sets[name]; !ok {
		return fmt.Errorf("set %s does not exist", name)
	}
	for _, rules := range k.chains {
		for _, r := range rules {
			if strings.Contains(r, "--match-set "+name+" ") || strings.Contains(r, "--add-set "+name+" ") {
				return fmt.Errorf("destroying %s: %w", name, errBusy)
			}
		}
	}
	k.Ops++
	delete(k.sets, name)
	return nil
}

// String renders the fake's state: jumps, chain rules, then our sets with
// members, all sorted. An empty string means nothing of ours is installed.
func (k *FakeKernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	chains := make([]string, 0, len(k.chains))
	for c := range k.chains {
		chains = append(chains, c)
	}
	slices.Sort(chains)
	for _, c := range chains {
		if k.jumps[c] > 0 {
			fmt.Fprintf(&b, "-A %s -j %s (x%d)\n", hook, c, k.jumps[c])
		}
		fmt.Fprintf(&b, ":%s\n", c)
		for _, r := range k.chains[c] {
			b.WriteString(r + "\n")
		}
	}
	names := make([]string, 0, len(k.sets))
	for n := range k.sets {
		if !k.Foreign[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "set %s:", n)
		for _, a := range sortedAddrs(k.sets[n]) {
			fmt.Fprintf(&b, " %s", a)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sortedAddrs are m's addresses in order.
func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return out
}
