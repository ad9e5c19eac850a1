package nfqbackend

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/act/plan"
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
	delay time.Duration // lingering: the delay its group had when it left
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
	// RiseKeep: the packet path remembers a former member's flows (the
	// delay each last had, see RiseLimit) this long after it left the
	// set, and for as long as it is armed after that. A writer that
	// paused is armed only a second after its last write (engine
	// "Returning writers"), often after it left; its connections carried
	// nothing meanwhile, so their SRTT still holds the delay, and forgetting
	// it would make the returning writer ramp from 0: in the lab's randw
	// each onset let 8 KiB writes through at 3–5 MB/s for half a second
	// with the delay armed at 35–45 ms. One that goes on sending unthrottled
	// is not armed, and is forgotten once RiseKeep has passed. (Exported:
	// the edt backend lingers as long, see throttle.Open.)
	RiseKeep = 3 * time.Second
)

// members tracks which consumers are throttled and which recently were,
// and renders the rules and sets that keep both in the queue.
type members struct {
	// small and def are the ports' splits (NfqueueConfig.SmallSegments,
	// SmallSegment), for the arming rules.
	small  map[uint16]int
	def    int
	last   plan.State
	active map[memberKey]membership // active memberships of the last state
	linger map[memberKey]membership // left recently; still queued, delay 0
	gone   map[netip.Addr]time.Time // left the set then (see RiseKeep)

	// By address, so that keep costs a few lookups whatever the number
	// of members: the packet path asks it for every destination it
	// remembers. The classes have the last state's members of active
	// groups and armed consumers.
	classes   classes
	lingerIPs map[netip.Addr]int      // memberships lingering per address
	sets      map[string][]netip.Addr // the last state's sets; never changed
	// shrunk is set when an address may have stopped being kept (see
	// keep): only then has the packet path anything to forget.
	shrunk bool
}

// apply takes a new state at now and returns the delay table for it.
func (ms *members) apply(s plan.State, now time.Time) *pathTable {
	if ms.linger == nil {
		ms.linger = map[memberKey]membership{}
	}
	if ms.sameMembers(s) {
		// Only delays changed, as at every tick while a controller
		// moves: the memberships stand, and so do the classes and
		// everything kept by address.
		for i, g := range s.Groups {
			last := ms.last.Groups[i]
			g.Members, g.Ports, g.Armed = last.Members, last.Ports, last.Armed
			ms.last.Groups[i] = g
		}
		return ms.classes.table(s)
	}
	was := ms.classes
	ms.classes = classify(s, len(was.of))
	cur := make(map[memberKey]membership, len(ms.active))
	for _, g := range s.Groups {
		if !g.Active() {
			continue
		}
		ports := g.TargetPorts()
		for _, m := range g.Members {
			cur[memberKey{g.Name, m.Unmap()}] = membership{ports: ports}
		}
	}
	had := map[string]time.Duration{}
	for _, g := range ms.last.Groups {
		had[g.Name] = max(g.WriteDelay, g.ReadDelay)
	}
	for k, m := range ms.active {
		if _, ok := cur[k]; !ok {
			m.left, m.delay = now, had[k.group]
			ms.addLinger(k, m)
		}
	}
	for k := range cur {
		ms.dropLinger(k)
	}
	// A member that left lingers; one that is no longer armed is not
	// kept any more.
	for a := range was.of {
		if _, ok := ms.classes.of[a]; !ok && ms.lingerIPs[a] == 0 {
			ms.shrunk = true
			break
		}
	}
	ms.active, ms.last = cur, ownState(s)
	ms.sets = plan.WantSets(ms.last)
	return ms.classes.table(s)
}

// sameMembers reports whether s has the groups, members, ports and armed
// consumers of the last state, each group as active and as armed: then
// only delays or rates changed.
func (ms *members) sameMembers(s plan.State) bool {
	if ms.active == nil || len(s.Groups) != len(ms.last.Groups) {
		return false
	}
	for i, g := range s.Groups {
		last := ms.last.Groups[i]
		if g.Name != last.Name || g.Active() != last.Active() || g.Arms() != last.Arms() ||
			!slices.Equal(g.Ports, last.Ports) || !slices.Equal(g.Members, last.Members) || !slices.Equal(g.Armed, last.Armed) {
			return false
		}
	}
	return true
}

// ownState copies s with slices of its own, so that a caller reusing
// its slices for the next state cannot change what sameMembers compares
// with.
func ownState(s plan.State) plan.State {
	s.Groups = slices.Clone(s.Groups)
	for i, g := range s.Groups {
		g.Members, g.Ports, g.Armed = slices.Clone(g.Members), slices.Clone(g.Ports), slices.Clone(g.Armed)
		s.Groups[i] = g
	}
	return s
}

// addLinger and dropLinger keep linger and lingerIPs in step.
func (ms *members) addLinger(k memberKey, m membership) {
	if _, ok := ms.linger[k]; !ok {
		if ms.lingerIPs == nil {
			ms.lingerIPs = map[netip.Addr]int{}
		}
		ms.lingerIPs[k.ip]++
	}
	ms.linger[k] = m
}

func (ms *members) dropLinger(k memberKey) {
	if _, ok := ms.linger[k]; !ok {
		return
	}
	delete(ms.linger, k)
	if ms.lingerIPs[k.ip]--; ms.lingerIPs[k.ip] <= 0 {
		delete(ms.lingerIPs, k.ip)
	}
}

// forgetDue reports, once, whether an address may have stopped being
// kept since the last call: the packet path then has something to
// forget (packetpath.Delayer.Forget). A new delay or a new member changes nothing
// it keeps.
func (ms *members) forgetDue() bool {
	due := ms.shrunk
	ms.shrunk = false
	return due
}

// plan drops the lingering members whose traffic paused (quiet) and
// returns the rules and sets for the rest: the last state's, plus each
// lingering member in its group's set, with a rule for groups that are
// gone. lingering reports whether any member still lingers.
func (ms *members) plan(now time.Time, queue uint16, quiet func(netip.Addr) bool) (rules []string, sets map[string][]netip.Addr, lingering bool) {
	sets = maps.Clone(ms.sets)
	if sets == nil {
		sets = map[string][]netip.Addr{}
	}
	for a, t := range ms.gone {
		if now.Sub(t) >= RiseKeep {
			delete(ms.gone, a)
			ms.shrunk = true
		}
	}
	var ghosts []plan.Group
	for _, k := range sortedMemberKeys(ms.linger) {
		m := ms.linger[k]
		if now.Sub(m.left) >= m.delay && quiet(k.ip) || now.Sub(m.left) >= lingerMax {
			ms.dropLinger(k)
			if ms.gone == nil {
				ms.gone = map[netip.Addr]time.Time{}
			}
			ms.gone[k.ip] = now
			continue
		}
		lingering = true
		n := plan.SetName(k.group)
		if _, ok := sets[n]; !ok {
			ghosts = append(ghosts, plan.Group{Name: k.group, Ports: m.ports})
		}
		if !slices.Contains(sets[n], k.ip) {
			// Clipped: the slice may be ms.sets's, which stays as it is.
			sets[n] = append(slices.Clip(sets[n]), k.ip)
		}
	}
	ghosts = slices.CompactFunc(ghosts, func(a, b plan.Group) bool { return a.Name == b.Name })
	// Only groups whose set can hold anyone get a rule: with nobody
	// throttled, lingering or armed, nothing of ours is on the path.
	var queued []plan.Group
	for _, g := range append(slices.Clone(ms.last.Groups), ghosts...) {
		if len(sets[plan.SetName(g.Name)]) > 0 || g.Arms() {
			queued = append(queued, g)
		}
	}
	rules = NfqueueRules(plan.State{Groups: queued}, queue)
	return append(rules, armRules(ms.last, ms.small, ms.def)...), sets, lingering
}

// keep reports whether the packet path keeps what it knows of a
// destination's flows at now: it is throttled, lingering or armed, or
// left the set within RiseKeep. A few lookups, whatever the number of
// members.
func (ms *members) keep(a netip.Addr, now time.Time) bool {
	if t, ok := ms.gone[a]; ok {
		if now.Sub(t) < RiseKeep {
			return true
		}
		delete(ms.gone, a)
	}
	if _, ok := ms.classes.of[a]; ok {
		return true
	}
	return ms.lingerIPs[a] > 0
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
