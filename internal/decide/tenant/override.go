package tenant

import "slices"

// Override is a runtime change of one consumer's terms ('sanqos
// throttle --share 4 10.0.0.5'): each field set replaces what the
// configuration gives the consumers Match selects, the others stay the
// configuration's. Overrides live beside the book, not in it, so a
// reload (a new book from the file) keeps them until they are cleared.
type Override struct {
	// Match is an address, a prefix, an initiator name or the name of
	// a configured consumer.
	Match                                  string
	Share, ReserveBps, CapBps, ThresholdMs *float64
}

type compiledOverride struct {
	compiled
	// name is Match when it may be a configured consumer's name.
	name string
	o    Override
}

// Over returns a book with b's entries and precedence and the overrides
// os laid over them; the first override that selects a consumer (by
// address, prefix, initiator name or its configured name) changes its
// terms. Each override is checked as an entry's terms are; nil os gives
// b's terms back. A runtime cap below a reservation lowers the
// reservation to it (the cap is the later word).
func (b *Book) Over(os []Override) (*Book, error) {
	nb := &Book{precedence: b.Precedence()}
	if b != nil {
		nb.entries = b.entries
	}
	for i, o := range os {
		// The match names the override in a refusal (compile's key).
		t := o.terms()
		t.Name = o.Match
		c, err := compile(i, Entry{Match: []string{o.Match}, Terms: t})
		if err != nil {
			return nil, err
		}
		co := compiledOverride{compiled: c, o: o}
		if len(c.names) > 0 {
			co.name = o.Match
		}
		nb.over = append(nb.over, co)
	}
	return nb, nil
}

// Overrides are the runtime overrides in force, in order.
func (b *Book) Overrides() []Override {
	if b == nil {
		return nil
	}
	out := make([]Override, len(b.over))
	for i, o := range b.over {
		out[i] = o.o
	}
	return slices.Clip(out)
}

// terms are the override's fields as Terms, unset ones zero.
func (o Override) terms() Terms {
	var t Terms
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&t.Share, o.Share)
	set(&t.ReserveBps, o.ReserveBps)
	set(&t.CapBps, o.CapBps)
	set(&t.ThresholdMs, o.ThresholdMs)
	return t
}

// apply lays o over t.
func (o compiledOverride) apply(t Terms) Terms {
	ot := o.o
	if ot.Share != nil {
		t.Share = *ot.Share
	}
	if ot.ReserveBps != nil {
		t.ReserveBps = *ot.ReserveBps
	}
	if ot.CapBps != nil {
		t.CapBps = *ot.CapBps
		if t.CapBps == 0 {
			t.BurstBytes = 0 // a burst needs a cap
		}
	}
	if ot.ThresholdMs != nil {
		t.ThresholdMs = *ot.ThresholdMs
	}
	if t.CapBps > 0 && t.ReserveBps > t.CapBps {
		t.ReserveBps = t.CapBps
	}
	return t
}
