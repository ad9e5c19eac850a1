package nfqbackend

import (
	"net/netip"
	"slices"
)

// programmed is what program gave the reconcilers. While a controller
// changes the delay every tick the rules and sets stay the same, and with
// thousands of members the reconcilers' diff of the sets would cost
// milliseconds of every tick to find nothing to do.
type programmed struct {
	rules []string
	sets  map[string][]netip.Addr
}

// same reports whether rules and sets are what p holds, in the same
// order (a state whose members come in another order is applied again,
// which finds nothing to do: correct, only slower).
func (p programmed) same(rules []string, sets map[string][]netip.Addr) bool {
	if p.sets == nil || !slices.Equal(p.rules, rules) || len(p.sets) != len(sets) {
		return false
	}
	for n, ms := range sets {
		if have, ok := p.sets[n]; !ok || !slices.Equal(have, ms) {
			return false
		}
	}
	return true
}
