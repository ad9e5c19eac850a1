//go:build linux

package qdisc

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"github.com/sanqos/sanqos/internal/act/edt"
	"github.com/sanqos/sanqos/internal/act/packetpath"
)

// TestBypassersOf: the initiators the classifier passed at its limit,
// summed over their ports, the most bypassed first (by address on a
// tie), those never bypassed left out, at most packetpath.MaxBypassers.
func TestBypassersOf(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("fd00::5")
	got := bypassersOf(map[edt.Key]edt.Counters{
		{Addr: a, Port: 3260}: {Delayed: 100, Bypassed: 5},
		{Addr: a, Port: 2049}: {Delayed: 10, Bypassed: 4},
		{Addr: b, Port: 3260}: {Delayed: 50, Bypassed: 9},
		{Addr: c, Port: 3260}: {Delayed: 70},
	})
	want := []packetpath.ConsumerStats{{Addr: a, Delayed: 110, Bypassed: 9}, {Addr: b, Delayed: 50, Bypassed: 9}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("bypassers %+v, want %+v", got, want)
	}
	many := map[edt.Key]edt.Counters{}
	for i := range 20 {
		many[edt.Key{Addr: netip.MustParseAddr(fmt.Sprintf("10.0.1.%d", i)), Port: 3260}] = edt.Counters{Bypassed: uint64(i + 1)}
	}
	got = bypassersOf(many)
	if len(got) != packetpath.MaxBypassers || got[0].Bypassed != 20 || got[packetpath.MaxBypassers-1].Bypassed != 5 {
		t.Errorf("of 20 bypassed initiators got %d, from %d to %d bypassed; want the %d most (20 to 5)", len(got), got[0].Bypassed, got[len(got)-1].Bypassed, packetpath.MaxBypassers)
	}
}
