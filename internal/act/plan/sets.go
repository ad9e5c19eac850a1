package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// SetName is the ipset of a group: SetPrefix and the group name reduced to
// characters iptables and ipset accept. Names that would be too long or
// had to be changed get a hash suffix so that two groups never share a set.
func SetName(group string) string {
	var b strings.Builder
	for _, r := range group {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	clean := b.String()
	if clean == group && len(owned.SetPrefix)+len(clean) <= owned.MaxSetName {
		return owned.SetPrefix + clean
	}
	sum := sha256.Sum256([]byte(group))
	h := hex.EncodeToString(sum[:4])
	room := owned.MaxSetName - len(owned.SetPrefix) - len(h) - 1
	if len(clean) > room {
		clean = clean[:room]
	}
	return owned.SetPrefix + clean + "-" + h
}

// PortMatch is the iptables match for the target (source) ports.
func PortMatch(ports []uint16) string {
	if len(ports) == 1 {
		return fmt.Sprintf("-p tcp -m tcp --sport %d", ports[0])
	}
	return "-p tcp -m multiport --sports " + PortList(ports)
}

// PortList renders ports as a multiport match lists them: "3260,860".
func PortList(ports []uint16) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprint(p)
	}
	return strings.Join(ps, ",")
}

// SortedGroups returns the groups in name order, so that generated rules
// do not depend on the order the caller listed them in.
func SortedGroups(s State) []Group {
	gs := slices.Clone(s.Groups)
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].Name < gs[j].Name })
	return gs
}

// ValidateShape rejects states no backend can make sense of.
func ValidateShape(s State) error {
	seen := map[string]bool{}
	for _, g := range s.Groups {
		if g.Name == "" {
			return fmt.Errorf("group with no name")
		}
		if seen[SetName(g.Name)] {
			return fmt.Errorf("group %q listed twice", g.Name)
		}
		seen[SetName(g.Name)] = true
		if g.WriteDelay < 0 || g.ReadDelay < 0 {
			return fmt.Errorf("group %q: negative delay", g.Name)
		}
	}
	return nil
}

// Refused says which parts of a state a backend left out; the rest of
// the state is in force. Apply returns it (wrapped, errors.As finds it)
// when it programmed the state without them.
type Refused struct{ Reasons []string }

func (r *Refused) Error() string {
	return "not throttled (the rest is): " + strings.Join(r.Reasons, "; ")
}

// Split returns s without what the IPv4-only backends (netem, htb) cannot
// program, one consumer or group at a time, and says what it left out
// (nil: nothing): IPv6 members, and groups with more ports than one
// iptables multiport match takes. Arming is left out without a word:
// only nfqueue and edt arm (see arm.go). The nfqueue backend keeps IPv6 members
// when ip6tables works.
func Split(s State) (State, *Refused) {
	out, why := SplitV6(s, false)
	return withoutArming(out), why
}

// SplitV6 is Split; with v6 it keeps IPv6 members (the nfqueue backend
// programs them with ip6tables and inet6 sets).
func SplitV6(s State, v6 bool) (State, *Refused) {
	var out State
	var why []string
	for _, g := range s.Groups {
		if err := ValidatePorts(g.Ports); err != nil {
			why = append(why, fmt.Sprintf("group %q: %v", g.Name, err))
			continue
		}
		var ms []netip.Addr
		for _, m := range g.Members {
			if m.Unmap().Is4() || v6 {
				ms = append(ms, m)
				continue
			}
			why = append(why, fmt.Sprintf("group %q: consumer %s: IPv6 consumers cannot be throttled by this backend (netem, htb and nfqueue without a working ip6tables program IPv4 only); use the nfqueue backend with ip6tables, or serve it over IPv4", g.Name, m))
		}
		if len(ms) != len(g.Members) {
			g.Members = ms
		}
		out.Groups = append(out.Groups, g)
	}
	if len(why) == 0 {
		return s, nil
	}
	return out, &Refused{Reasons: why}
}

// WantSets is the desired membership of every set: a group's members are
// in its set only while the group is active, so an idle group costs one
// failed set lookup per packet and nothing in user space; a group that
// arms has its armed consumers in a set of their own (see arm.go).
func WantSets(s State) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, g := range s.Groups {
		var ms []netip.Addr
		if g.Active() {
			for _, m := range g.Members {
				ms = append(ms, m.Unmap())
			}
		}
		out[SetName(g.Name)] = ms
	}
	armSets(s, out)
	return out
}
