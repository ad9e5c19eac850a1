package nfqbackend

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// What the backend programs of a state (throttle.InForce reports it):
// its IPv6 consumers only with ip6tables, everything else as asked.
func TestProgramsKeepsIPv6WithIp6tables(t *testing.T) {
	v4, v6, armed := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00::3"), netip.MustParseAddr("10.0.0.4")
	s := plan.State{Groups: []plan.Group{{Name: "vg", Members: []netip.Addr{v4, v6}, WriteDelay: 200 * time.Millisecond,
		Armed: []netip.Addr{armed}, ArmedDelay: 150 * time.Millisecond}}}
	got := (&Nfqueue{rec6: &owned.Reconciler{}}).Programs(s)
	if len(got.Groups) != 1 || !slices.Equal(got.Groups[0].Members, []netip.Addr{v4, v6}) || !slices.Equal(got.Groups[0].Armed, []netip.Addr{armed}) {
		t.Errorf("with ip6tables: %+v, want the state as asked", got)
	}
	got = (&Nfqueue{}).Programs(s)
	if len(got.Groups) != 1 || !slices.Equal(got.Groups[0].Members, []netip.Addr{v4}) || !slices.Equal(got.Groups[0].Armed, []netip.Addr{armed}) {
		t.Errorf("without ip6tables: %+v, want the IPv6 member left out", got)
	}
}
