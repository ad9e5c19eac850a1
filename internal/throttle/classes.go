package throttle

import (
	"net/netip"
	"strconv"
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
// the consumers its groups arm.
func classify(s State, size int) classes {
	type in struct{ member, armed []int }
	by := make(map[netip.Addr]*in, size)
	var order []netip.Addr
	at := func(a netip.Addr) *in {
		a = a.Unmap()
		x := by[a]
		if x == nil {
			x = &in{}
			by[a] = x
			order = append(order, a)
		}
		return x
	}
	for i, g := range s.Groups {
		if g.Active() {
			for _, m := range g.Members {
				x := at(m)
				x.member = append(x.member, i)
			}
		}
		if g.armed() {
			for _, a := range g.Armed {
				x := at(a)
				x.armed = append(x.armed, i)
			}
		}
	}
	c := classes{of: make(map[netip.Addr]int32, len(by))}
	ids := map[string]int32{}
	var sig []byte
	for _, a := range order {
		x := by[a]
		sig = sig[:0]
		for _, i := range x.member {
			sig = strconv.AppendInt(append(sig, 'm'), int64(i), 10)
		}
		for _, i := range x.armed {
			sig = strconv.AppendInt(append(sig, 'a'), int64(i), 10)
		}
		id, ok := ids[string(sig)]
		if !ok {
			id = int32(len(c.defs))
			ids[string(sig)] = id
			c.defs = append(c.defs, classDef{rep: a, member: x.member, armed: x.armed})
		}
		c.of[a] = id
	}
	return c
}

// table returns the delays of the classes under s, which has the groups
// s had when classified (only delays may differ).
func (c classes) table(s State) *pathTable {
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
			arming := State{Groups: make([]Group, len(def.armed))}
			for j, gi := range def.armed {
				g := s.Groups[gi]
				arming.Groups[j] = Group{Name: g.Name, Armed: []netip.Addr{def.rep}, ArmedDelay: g.ArmedDelay}
			}
			t := delays{def.rep: d}
			armedDelays(arming, t)
			d = t[def.rep]
		}
		out[i] = d
	}
	return &pathTable{class: c.of, delays: out}
}
