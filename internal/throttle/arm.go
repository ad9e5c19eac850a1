package throttle

import (
	"fmt"
	"net/netip"
	"strings"
)

// Arming. The engine sees a writer only once its writes show in a
// tick's counters, so a writer that comes back after a pause runs
// unthrottled for up to a tick plus the time it takes to program the
// set: long enough to queue hundreds of small random writes at a busy
// disk, behind which the reader then waits for a second or two (the
// lab's randw onsets peaked at 25–120 ms with the delay already armed in
// the engine). The data path sees it sooner: a client that sends a data
// segment to a storage port is writing. So a group names the consumers
// it arms (recent members, see engine "Returning writers") and the delay
// they left, and a rule of our chain, jumped to from INPUT, puts such a
// consumer in the group's set with its first write data segment:
//
//	-A SANQOS-<inst> -s A -p tcp -m multiport --dports P -m length --length L:65535 -j SET --add-set sanqos-<inst>-<group> src --timeout 1
//
// From that packet on, what the target sends it goes to the queue and
// its write direction is held at ArmedDelay: from the responses to its
// first writes, not a tick later. The throttle's rules hold: a consumer
// is delayed only once it writes (requests and ACKs are not longer than
// L, the same split the wire counters use, so a reader never arms), and
// the kernel's entry lapses after armTimeout unless the daemon has made
// the consumer a member by then (so a few small writes are held that
// long at most). Without --exist the rule never touches an entry that is
// there already: a member's permanent entry stays permanent. The sets
// are created with timeout support for this; the daemon's own entries
// are added with timeout 0, permanent.
//
// The rule only adds to a set and never drops or holds anything itself:
// if sanqos dies, the queue's bypass lets what is in a set pass, as
// before, and the next start removes the chain with its jumps.
const armTimeout = 1 // seconds; the smallest an ipset entry can live

// armRules renders the arming rules of the groups in s that arm anyone,
// with the INPUT jump they need; small and def are the ports' splits.
func armRules(s State, small map[uint16]int, def int) []string {
	var out []string
	for _, g := range sortedGroups(s) {
		if !g.armed() {
			continue
		}
		for _, pg := range splitGroups(g.ports(), small, def) {
			for _, a := range g.Armed {
				out = append(out, fmt.Sprintf("-A %s -s %s -p tcp -m multiport --dports %s -m length --length %d:65535 -j SET --add-set %s src --timeout %d",
					Chain, hostPrefix(a.Unmap()), portList(pg.ports), lengthSplit(pg.small)+1, SetName(g.Name), armTimeout))
			}
		}
	}
	if len(out) > 0 {
		out = append([]string{inputJump(Chain)}, out...)
	}
	return out
}

// hostPrefix renders a as the one-address prefix iptables matches.
func hostPrefix(a netip.Addr) string {
	return netip.PrefixFrom(a, a.BitLen()).String()
}

// armsV6 reports whether an arming rule (see armRules) arms an IPv6
// address.
func armsV6(rule string) bool {
	_, rest, _ := strings.Cut(rule, " -s ")
	src, _, _ := strings.Cut(rest, " ")
	p, err := netip.ParsePrefix(src)
	return err == nil && p.Addr().Is6()
}

// armedDelays adds the write delay of the consumers s arms to t, where
// they have none of their own: a consumer the kernel puts in a set finds
// its delay on its first packet.
func armedDelays(s State, t delays) {
	for _, g := range s.Groups {
		if !g.armed() {
			continue
		}
		for _, a := range g.Armed {
			a = a.Unmap()
			d := t[a]
			if d.write == 0 {
				d.write = g.ArmedDelay
				t[a] = d
			}
		}
	}
}
