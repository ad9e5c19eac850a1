package nfqbackend

import (
	"fmt"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
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
// they left. The armed addresses are a set of their own, and one rule
// per port split of our chain, jumped to from INPUT, puts an armed
// consumer in the group's set with its first write data segment:
//
//	-A SANQOS-<inst> -p tcp -m multiport --dports P -m length --length L:65535 -m set --match-set sanqos-<inst>-<group>:arm src -j SET --add-set sanqos-<inst>-<group> src --timeout 1
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
// A set, not a rule per armed address: every packet clients send to the
// storage ports walks the rules, and a set lookup costs the same for one
// armed consumer as for thousands (audit N10).
//
// Spoofing: the rule matches the source address only, so an off-path
// sender that forges a recently paused writer's address can keep that
// writer armed, held at ArmedDelay while it writes, for as long as the
// engine arms it. Matching established connections only would close
// that, but conntrack's state match loads connection tracking for every
// flow of the target, and xt_socket is missing from some kernels (the
// lab's among them); the harm is bounded by the armed delay, so the
// rule stays cheap.
//
// The rule only adds to a set and never drops or holds anything itself:
// if sanqos dies, the queue's bypass lets what is in a set pass, as
// before, and the next start removes the chain with its jumps.
const armTimeout = owned.ArmTimeout

// armRules renders the arming rules of the groups in s that arm anyone,
// with the INPUT jump they need; small and def are the ports' splits.
func armRules(s plan.State, small map[uint16]int, def int) []string {
	var out []string
	for _, g := range plan.SortedGroups(s) {
		if !g.Arms() {
			continue
		}
		for _, pg := range plan.SplitGroups(g.TargetPorts(), small, def) {
			out = append(out, fmt.Sprintf("-A %s -p tcp -m multiport --dports %s -m length --length %d:65535 -m set --match-set %s src -j SET --add-set %s src --timeout %d",
				owned.Chain, plan.PortList(pg.Ports), plan.LengthSplit(pg.Small)+1, plan.ArmSetName(g.Name), plan.SetName(g.Name), armTimeout))
		}
	}
	if len(out) > 0 {
		out = append([]string{owned.InputJump(owned.Chain)}, out...)
	}
	return out
}

// armedDelays adds the write delay of the consumers s arms to t, where
// they have none of their own: a consumer the kernel puts in a set finds
// its delay on its first packet.
func armedDelays(s plan.State, t delays) {
	for _, g := range s.Groups {
		if !g.Arms() {
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
