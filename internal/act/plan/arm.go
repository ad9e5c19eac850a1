package plan

import (
	"net/netip"
	"slices"
)

// Arming: see throttle's arm.go. A group's armed consumers have a set of
// their own, which the kernel fills.

// ArmSuffix follows a group's set name in the name of its set of armed
// consumers. SetName never yields a ':', so no group's set can be
// another group's armed set.
const ArmSuffix = ":arm"

// ArmSetName is the set of the consumers group arms.
func ArmSetName(group string) string { return SetName(group) + ArmSuffix }

// armSets adds to sets the set of armed consumers of each group of s
// that arms anyone.
func armSets(s State, sets map[string][]netip.Addr) {
	for _, g := range s.Groups {
		if !g.Arms() {
			continue
		}
		ms := make([]netip.Addr, 0, len(g.Armed))
		for _, a := range g.Armed {
			ms = append(ms, a.Unmap())
		}
		sets[ArmSetName(g.Name)] = ms
	}
}

// withoutArming returns s with no group arming anyone, for the backends
// that do not arm (netem, htb): they would create sets no rule uses. The
// edt backend arms in its ingress program (bpf/edt.bpf.c).
func withoutArming(s State) State {
	out := State{Groups: slices.Clone(s.Groups)}
	for i := range out.Groups {
		out.Groups[i].Armed, out.Groups[i].ArmedDelay = nil, 0
	}
	return out
}
