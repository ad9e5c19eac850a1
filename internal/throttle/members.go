package throttle

import (
	"net/netip"
	"slices"
	"strings"
	"time"
)

// memberKey is one consumer in one group.
type memberKey struct {
	group string
	ip    netip.Addr
}

// membership is what a member leaving a group needs to keep being queued
// until its held packets are out.
type membership struct {
	ports []uint16
	delay time.Duration // largest delay it had
	left  time.Time     // lingering: when it stopped being throttled
}

// A member that stops being throttled leaves its set only once its
// traffic has paused: a packet already on its way through the queue when
// the member leaves would be overtaken by the next one, which no longer
// goes through the queue. So it lingers (queued, delay 0) until nothing
// arrived for it for lingerQuiet, and at most lingerMax, after which
// we accept that one packet might be overtaken rather than keep a busy
// unthrottled consumer in user space for good.
const (
	lingerQuiet = 20 * time.Millisecond
	lingerMax   = 10 * time.Second
	// riseKeep: the packet path remembers a former member's flows (the
	// delay each last had, see RiseLimit) this long after it left the
	// set, and for as long as it is armed after that. A writer that
	// paused is armed only a second after its last write (engine
	// "Returning writers"), often after it left; its connections carried
	// nothing meanwhile, so their SRTT still holds the delay, and forgetting
	// it would make the returning writer ramp from 0: in the lab's randw
	// each onset let 8 KiB writes through at 3–5 MB/s for half a second
	// with the delay armed at 35–45 ms. One that goes on sending unthrottled
	// is not armed, and is forgotten once riseKeep has passed.
	riseKeep = 3 * time.Second
)

// members tracks which consumers are throttled and which recently were,
// and renders the rules and sets that keep both in the queue.
type members struct {
	// small and def are the ports' splits (NfqueueConfig.SmallSegments,
	// SmallSegment), for the arming rules.
	small  map[uint16]int
	def    int
	last   State
	active map[memberKey]membership // active memberships of the last state
	linger map[memberKey]membership // left recently; still queued, delay 0
	gone   map[netip.Addr]time.Time // left the set then (see riseKeep)
}

// update takes a new state at now and returns the delay table for it.
func (ms *members) update(s State, now time.Time) delays {
	if ms.linger == nil {
		ms.linger = map[memberKey]membership{}
	}
	t := delays{}
	cur := map[memberKey]membership{}
	for _, g := range s.Groups {
		if !g.Active() {
			continue
		}
		for _, m := range g.Members {
			m = m.Unmap()
			d := t[m]
			d.write, d.read = max(d.write, g.WriteDelay), max(d.read, g.ReadDelay)
			t[m] = d
			cur[memberKey{g.Name, m}] = membership{ports: g.ports(), delay: max(g.WriteDelay, g.ReadDelay)}
		}
	}
	for k, m := range ms.active {
		if _, ok := cur[k]; !ok {
			m.left = now
			ms.linger[k] = m
		}
	}
	for k := range cur {
		delete(ms.linger, k)
	}
	armedDelays(s, t)
	ms.active, ms.last = cur, s
	return t
}

// plan drops the lingering members whose traffic paused (quiet) and
// returns the rules and sets for the rest: the last state's, plus each
// lingering member in its group's set, with a rule for groups that are
// gone. lingering reports whether any member still lingers.
func (ms *members) plan(now time.Time, queue uint16, quiet func(netip.Addr) bool) (rules []string, sets map[string][]netip.Addr, lingering bool) {
	sets = wantSets(ms.last)
	for a, t := range ms.gone {
		if now.Sub(t) >= riseKeep {
			delete(ms.gone, a)
		}
	}
	var ghosts []Group
	for _, k := range sortedMemberKeys(ms.linger) {
		m := ms.linger[k]
		if now.Sub(m.left) >= m.delay && quiet(k.ip) || now.Sub(m.left) >= lingerMax {
			delete(ms.linger, k)
			if ms.gone == nil {
				ms.gone = map[netip.Addr]time.Time{}
			}
			ms.gone[k.ip] = now
			continue
		}
		lingering = true
		n := SetName(k.group)
		if _, ok := sets[n]; !ok {
			ghosts = append(ghosts, Group{Name: k.group, Ports: m.ports})
		}
		if !slices.Contains(sets[n], k.ip) {
			sets[n] = append(sets[n], k.ip)
		}
	}
	ghosts = slices.CompactFunc(ghosts, func(a, b Group) bool { return a.Name == b.Name })
	rules = NfqueueRules(State{Groups: append(slices.Clone(ms.last.Groups), ghosts...)}, queue)
	return append(rules, armRules(ms.last, ms.small, ms.def)...), sets, lingering
}

// keep reports whether the packet path keeps what it knows of a
// destination's flows at now: it is throttled, lingering or armed, or
// left the set within riseKeep.
func (ms *members) keep(a netip.Addr, now time.Time) bool {
	if t, ok := ms.gone[a]; ok {
		if now.Sub(t) < riseKeep {
			return true
		}
		delete(ms.gone, a)
	}
	for _, g := range ms.last.Groups {
		if g.armed() && slices.ContainsFunc(g.Armed, func(x netip.Addr) bool { return x.Unmap() == a }) {
			return true
		}
	}
	for k := range ms.active {
		if k.ip == a {
			return true
		}
	}
	for k := range ms.linger {
		if k.ip == a {
			return true
		}
	}
	return false
}

func sortedMemberKeys(m map[memberKey]membership) []memberKey {
	out := make([]memberKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b memberKey) int {
		if c := strings.Compare(a.group, b.group); c != 0 {
			return c
		}
		return a.ip.Compare(b.ip)
	})
	return out
}
