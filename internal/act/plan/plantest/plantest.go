// Package plantest holds the throttle states the backends' golden tests
// replay, one copy for every backend (qdisc, nfqueue), so that their
// golden files describe the same sequence. Only tests import it
// (internal/lint checks).
package plantest

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/act/plan"
)

// GoldenStates is a scripted sequence: a group appears, gains members
// and delays, goes idle, a second one appears, all disappear.
func GoldenStates() []plan.State {
	a, b := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	return []plan.State{
		{Groups: []plan.Group{{Name: "vg-data", Members: []netip.Addr{a}, WriteDelay: 4600 * time.Microsecond}}},
		{Groups: []plan.Group{{Name: "vg-data", Members: []netip.Addr{a, b}, WriteDelay: 5 * time.Millisecond, ReadDelay: 2 * time.Millisecond, ReadRate: 1 << 20}}},
		{Groups: []plan.Group{{Name: "vg-data", Members: []netip.Addr{a, b}}}},
		{Groups: []plan.Group{
			{Name: "vg-data", Members: []netip.Addr{a}, WriteDelay: 20 * time.Millisecond},
			{Name: "fs/sda1", Members: []netip.Addr{b}, Ports: []uint16{3260, 3261}, ReadDelay: 300 * time.Microsecond, ReadRate: 256000},
		}},
		{},
	}
}
