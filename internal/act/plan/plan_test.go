package plan

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
)

func TestSetName(t *testing.T) {
	seen := map[string]string{}
	for _, g := range []string{"vg-data", "fs/sda1", "fs_sda1", "a-very-long-resource-name-that-needs-hashing", "a-very-long-resource-name-that-needs-hashing2"} {
		n := SetName(g)
		if len(n) > owned.MaxSetName || !strings.HasPrefix(n, owned.SetPrefix) {
			t.Errorf("SetName(%q) = %q: too long or without prefix", g, n)
		}
		if o, dup := seen[n]; dup {
			t.Errorf("groups %q and %q share set %q", o, g, n)
		}
		seen[n] = g
	}
}

// The backends that do not arm (netem, htb: Split) get no set of armed
// consumers, which no rule of theirs would use.
func TestSplitLeavesArmingOut(t *testing.T) {
	s := State{Groups: []Group{{Name: "vg", Members: []netip.Addr{ip("10.0.0.3")}, WriteDelay: time.Millisecond,
		Armed: []netip.Addr{ip("10.0.0.2")}, ArmedDelay: time.Millisecond}}}
	got, _ := Split(s)
	for n := range WantSets(got) {
		if strings.HasSuffix(n, ArmSuffix) {
			t.Errorf("set %s for a backend that does not arm", n)
		}
	}
	if len(s.Groups[0].Armed) != 1 {
		t.Error("Split changed the caller's state")
	}
}

func TestSmallSegmentsFor(t *testing.T) {
	tests := []struct {
		name  string
		ports []uint16
		set   map[uint16]int
		def   int
		want  map[uint16]int
	}{
		{"protocol defaults", []uint16{3260, 2049, 10809, 4420}, nil, 128, map[uint16]int{3260: 128, 2049: 256, 10809: 128, 4420: 128}},
		{"unknown port takes def", []uint16{3261}, nil, 100, map[uint16]int{3261: 100}},
		{"configured wins", []uint16{2049, 3260}, map[uint16]int{2049: 300}, 128, map[uint16]int{2049: 300, 3260: 128}},
	}
	for _, tc := range tests {
		got := SmallSegmentsFor(tc.ports, tc.set, tc.def)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for p, v := range tc.want {
			if got[p] != v {
				t.Errorf("%s: port %d = %d, want %d", tc.name, p, got[p], v)
			}
		}
	}
	if err := ValidateSmallSegments(map[uint16]int{2049: MaxSmallSegment + 1}); err == nil {
		t.Error("a split over MaxSmallSegment accepted")
	}
	if SmallOf(map[uint16]int{2049: 256}, 128, 2049) != 256 || SmallOf(nil, 128, 2049) != 128 {
		t.Error("smallOf: per-port split not used, or default not used without one")
	}
}

// TestValidatePorts: the port validator config and the control socket
// use refuses what one iptables rule cannot take.
func TestValidatePorts(t *testing.T) {
	if err := ValidatePorts([]int{3260, 3261, 3261}); err != nil {
		t.Fatal(err)
	}
	fifteen := make([]uint16, 15)
	for i := range fifteen {
		fifteen[i] = uint16(1 + i)
	}
	if err := ValidatePorts(fifteen); err != nil {
		t.Fatalf("15 ports refused: %v", err)
	}
	if err := ValidatePorts(append(fifteen, 16)); err == nil || !strings.Contains(err.Error(), "at most 15") {
		t.Fatalf("16 ports: %v", err)
	}
	if err := ValidatePorts([]int{0}); err == nil {
		t.Fatal("port 0 accepted")
	}
	if err := ValidatePorts([]int{70000}); err == nil {
		t.Fatal("port 70000 accepted")
	}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }
