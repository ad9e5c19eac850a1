package throttle

import (
	"maps"
	"net/netip"
	"testing"
	"time"
)

// What each backend holds of a state: the engine's delay, unless the
// backend leaves the consumer out (IPv6 on netem and htb), does not
// arm, or holds nobody at all. (nfqueue with ip6tables: nfqbackend's
// TestProgramsKeepsIPv6WithIp6tables.)
func TestInForce(t *testing.T) {
	v4, v6, armed := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00::3"), netip.MustParseAddr("10.0.0.4")
	idle := netip.MustParseAddr("10.0.0.5")
	s := State{Groups: []Group{
		{Name: "vg", Members: []netip.Addr{v4, v6}, WriteDelay: 200 * time.Millisecond,
			Armed: []netip.Addr{armed}, ArmedDelay: 150 * time.Millisecond},
		{Name: "idle", Members: []netip.Addr{idle}}, // no delay: holds nobody
	}}
	all := map[netip.Addr]time.Duration{v4: 200 * time.Millisecond, v6: 200 * time.Millisecond, armed: 150 * time.Millisecond}
	tests := []struct {
		name string
		b    Backend
		want map[netip.Addr]time.Duration
	}{
		{"nfqueue without ip6tables", &Nfqueue{}, map[netip.Addr]time.Duration{v4: 200 * time.Millisecond, armed: 150 * time.Millisecond}},
		{"netem", &Netem{}, map[netip.Addr]time.Duration{v4: 200 * time.Millisecond}},
		{"htb", &HTB{}, map[netip.Addr]time.Duration{v4: 200 * time.Millisecond}},
		{"netem with htb rates", &Composite{Delay: &Netem{}}, map[netip.Addr]time.Duration{v4: 200 * time.Millisecond}},
		{"edt (IPv6 too, arming too)", &EDT{}, all},
		{"dry-run", &DryRun{}, map[netip.Addr]time.Duration{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InForce(tt.b, s); !maps.Equal(got, tt.want) {
				t.Errorf("in force %v, want %v", got, tt.want)
			}
		})
	}
}
