package qdisc

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
	"github.com/sanqos/sanqos/internal/decide/direction"
)

// HTB throttles the read direction by bandwidth instead of delay (thesis
// §5.2): every member of a group with a ReadRate gets an HTB class of that
// rate on Dev, and iptables CLASSIFY sends the member's data segments (the
// read direction, longer than the small-segment split) from the target
// ports to it. ACKs and small segments stay in the default class, so
// writes are not slowed. Delays in the state are ignored.
type HTB struct {
	tcRoot
	minor   map[netip.Addr]int // class minor per member, stable while present
	next    int
	classes map[int]uint64 // installed classes and their rates
}

// NewHTB removes leftovers and installs the HTB root on cfg.Dev.
func NewHTB(ctx context.Context, cfg TCConfig) (*HTB, error) {
	if err := cfg.defaults("htb"); err != nil {
		return nil, err
	}
	b := &HTB{tcRoot: newTCRoot(cfg, "htb", HTBHandle),
		minor: map[netip.Addr]int{}, next: classBase, classes: map[int]uint64{}}
	if _, _, err := b.build(ctx, nil); err != nil {
		return nil, fmt.Errorf("building the htb qdiscs on %s: %w", cfg.Dev, err)
	}
	return b, nil
}

func (b *HTB) Name() string { return "htb" }

// want is the rate per member: the lowest of its groups' rates.
func (b *HTB) want(s plan.State) map[netip.Addr]uint64 {
	w := map[netip.Addr]uint64{}
	for _, g := range s.Groups {
		if g.ReadRate == 0 {
			continue
		}
		for _, m := range g.Members {
			m = m.Unmap()
			if r, ok := w[m]; !ok || g.ReadRate < r {
				w[m] = g.ReadRate
			}
		}
	}
	return w
}

// plan assigns class minors and renders the rules for s.
func (b *HTB) plan(s plan.State) (map[int]uint64, []string) {
	w := b.want(s)
	addrs := make([]netip.Addr, 0, len(w))
	for a := range w {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, func(x, y netip.Addr) int { return x.Compare(y) })
	for a := range b.minor {
		if _, ok := w[a]; !ok {
			delete(b.minor, a)
		}
	}
	classes := map[int]uint64{}
	var rules []string
	ports := map[netip.Addr][]uint16{}
	for _, g := range plan.SortedGroups(s) {
		if g.ReadRate == 0 {
			continue
		}
		for _, m := range g.Members {
			ports[m.Unmap()] = append(ports[m.Unmap()], g.TargetPorts()...)
		}
	}
	for _, a := range addrs {
		mi, ok := b.minor[a]
		if !ok {
			mi = b.next
			b.next++
			b.minor[a] = mi
		}
		classes[mi] = w[a]
		ps := slices.Compact(slices.Sorted(slices.Values(ports[a])))
		for _, pg := range plan.SplitGroups(ps, b.cfg.SmallSegments, b.cfg.SmallSegment) {
			rules = append(rules, fmt.Sprintf("-A %s -d %s/32 %s %s -j CLASSIFY --set-class %s",
				owned.Chain, a, plan.PortMatch(pg.Ports), dirMatch(direction.Read, pg.Small), classID(HTBHandle, mi)))
		}
	}
	return classes, rules
}

func (b *HTB) Apply(ctx context.Context, s plan.State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	// What cannot be programmed (an IPv6 member) is left out and
	// reported; the rest is applied.
	s, refused := plan.Split(s)
	if err := b.lock(); err != nil {
		return err
	}
	defer b.mu.Unlock()
	classes, rules := b.plan(s)
	if len(rules) > 0 {
		if err := b.ensure(ctx); err != nil {
			return err
		}
	}
	h := fmt.Sprintf("%x:", HTBHandle)
	for _, mi := range sortedInts(classes) {
		if r, ok := b.classes[mi]; ok && r == classes[mi] {
			continue
		}
		rate := fmt.Sprintf("%dbps", classes[mi]) // tc: bps = bytes per second
		if _, err := b.cfg.Run.Run(ctx, "", "tc", "class", "replace", "dev", b.cfg.Dev, "parent", h,
			"classid", fmt.Sprintf("%x:%x", HTBHandle, mi), "htb", "rate", rate, "ceil", rate); err != nil {
			return fmt.Errorf("setting read rate class: %w", err)
		}
		b.classes[mi] = classes[mi]
	}
	if err := b.rec.Apply(ctx, rules, nil); err != nil {
		return fmt.Errorf("programming the htb data path: %w", err)
	}
	for _, mi := range sortedInts(b.classes) {
		if _, ok := classes[mi]; ok {
			continue
		}
		if _, err := b.cfg.Run.Run(ctx, "", "tc", "class", "del", "dev", b.cfg.Dev,
			"classid", fmt.Sprintf("%x:%x", HTBHandle, mi)); err != nil {
			return fmt.Errorf("removing read rate class: %w", err)
		}
		delete(b.classes, mi)
	}
	if len(rules) == 0 {
		// The classes go with the root.
		b.idle(func() { b.classes = map[int]uint64{} })
	}
	if refused != nil {
		return refused
	}
	return nil
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Dev is the interface the classes are on.
func (b *HTB) Dev() string { return b.cfg.Dev }
