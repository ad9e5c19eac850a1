package nfqbackend

import (
	"net/netip"
	"slices"

	"github.com/sanqos/sanqos/internal/act/plan"
)

// pathTable is the delay table the packet path reads: each consumer's
// class, and each class's delays. The consumers of a class are in the
// same groups, so the common change, a new delay for a group at every
// tick while its resource is over its threshold, makes a new slice of a
// few classes; the map of every consumer is made anew only when
// membership changes. A table is never changed once the packet path may
// read it.
type pathTable struct {
	class  map[netip.Addr]int32
	delays []dirDelays
}

// of returns the delays of consumer a (none when it is in no class).
func (t *pathTable) of(a netip.Addr) dirDelays {
	if i, ok := t.class[a]; ok {
		return t.delays[i]
	}
	return dirDelays{}
}

// tableOf makes a table with a class per consumer of d.
func tableOf(d delays) *pathTable {
	t := &pathTable{class: make(map[netip.Addr]int32, len(d)), delays: make([]dirDelays, 0, len(d))}
	for a, x := range d {
		t.class[a] = int32(len(t.delays))
		t.delays = append(t.delays, x)
	}
	return t
}

// classes sorts the consumers of a state by the groups that delay them.
type classes struct {
	of   map[netip.Addr]int32
	defs []classDef
}

type classDef struct {
	rep    netip.Addr // one of its consumers
	member []int      // the active groups it is a member of, by index
	armed  []int      // the groups that arm it
}

// classify sorts the consumers of s: members of its active groups and
// the consumers its groups arm. A consumer's class follows it through
// the groups in order: each group it is in moves it to the class of its
// groups so far plus this one, found in a small table of such steps, so
// that sorting thousands of consumers costs a few map lookups each and
// no allocation per consumer.
func classify(s plan.State, size int) classes {
	type step struct {
		from int32 // class so far; -1: none yet
		by   int   // group index; -1-index when the group arms it
	}
	c := classes{of: make(map[netip.Addr]int32, size)}
	steps := map[step]int32{}
	move := func(a netip.Addr, by int) {
		a = a.Unmap()
		from, ok := c.of[a]
		if !ok {
			from = -1
		}
		to, ok := steps[step{from, by}]
		if !ok {
			var def classDef
			if from >= 0 {
				prev := c.defs[from]
				def.member, def.armed = slices.Clone(prev.member), slices.Clone(prev.armed)
			}
			if by >= 0 {
				def.member = append(def.member, by)
			} else {
				def.armed = append(def.armed, -1-by)
			}
			def.rep = a
			to = int32(len(c.defs))
			c.defs = append(c.defs, def)
			steps[step{from, by}] = to
		}
		c.of[a] = to
	}
	for i, g := range s.Groups {
		if g.Active() {
			for _, m := range g.Members {
				move(m, i)
			}
		}
		if g.Arms() {
			for _, a := range g.Armed {
				move(a, -1-i)
			}
		}
	}
	return c
}

// table returns the delays of the classes under s, which has the groups
// s had when classified (only delays may differ).
func (c classes) table(s plan.State) *pathTable {
	out := make([]dirDelays, len(c.defs))
	for i, def := range c.defs {
		var d dirDelays
		for _, gi := range def.member {
			g := s.Groups[gi]
			d.write, d.read = max(d.write, g.WriteDelay), max(d.read, g.ReadDelay)
		}
		if len(def.armed) > 0 {
			// Arming decides the rest, by the rules of arm.go, for one
			// consumer standing for the class.
			arming := plan.State{Groups: make([]plan.Group, len(def.armed))}
			for j, gi := range def.armed {
				g := s.Groups[gi]
				arming.Groups[j] = plan.Group{Name: g.Name, Armed: []netip.Addr{def.rep}, ArmedDelay: g.ArmedDelay}
			}
			t := delays{def.rep: d}
			armedDelays(arming, t)
			d = t[def.rep]
		}
		out[i] = d
	}
	return &pathTable{class: c.of, delays: out}
}
