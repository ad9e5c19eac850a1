package diskmodel

import "time"

// segment is one read-ahead stream in a spindle's buffer. It holds
// [low, fill(t)): the read that started it and what the head has read after
// it. While active, the head fills it at media rate from base, starting at
// since, up to limit; once the head is taken the fill stops at held.
type segment struct {
	low, base, limit int64
	since            time.Time
	held             int64 // the fill when the head was taken; -1 while active
	used             time.Time
}

// fill is how far the segment holds data at t.
func (g *segment) fill(t time.Time, mbs float64) int64 {
	if g.held >= 0 {
		return g.held
	}
	if !t.After(g.since) {
		return g.base
	}
	f := g.base + int64(t.Sub(g.since).Seconds()*mbs*1e6)
	return min(f, g.limit)
}

// readBuffered serves a read from the read-ahead buffer if a segment holds
// it, or will hold it as soon as the head, still filling that segment, gets
// there. It returns false when the read must go to the media.
func (a *Array) readBuffered(sp *spindle, slot int, start time.Time, local, n int64) (time.Time, bool) {
	rate := a.p.TransferMBs
	for i := range sp.segs {
		g := &sp.segs[i]
		if local < g.low || local+n > g.limit {
			continue
		}
		have := g.fill(start, rate)
		// ready is when the buffer holds the whole read: now, or, when the
		// head still filling this segment is short of it, once it gets there
		// (streaming: the transfer overlaps the media read).
		ready := start
		if local+n > have {
			if g.held >= 0 {
				continue
			}
			ready = g.since.Add(ms(float64(local+n-g.base) / (rate * 1e3)))
		}
		if g.held < 0 && have >= g.limit {
			// The head had stopped at the limit; it resumes now.
			g.base, g.since = have, start
		}
		g.limit = max(g.limit, local+n+a.p.ReadAheadBytes)
		g.used = start
		a.stats.ReadAheadHits++
		positioned := start.Add(ms(a.p.CommandOverheadMs))
		var end time.Time
		if a.p.BusMBs > 0 {
			busD := ms(float64(n) / (a.p.BusMBs * 1e3))
			a.stats.BusBusy += busD
			end = a.bus.book(later(positioned, ready.Add(-busD)), busD).Add(busD)
		} else {
			// No shared channel: the buffer empties at the media rate.
			end = later(positioned.Add(ms(float64(n)/(rate*1e3))), ready)
		}
		a.stats.SpindleBusySum += end.Sub(start)
		sp.slots[slot] = end
		return end, true
	}
	return time.Time{}, false
}

// takeHead stops the active segment's fill when an operation needs the
// head at start: the head is then where the fill got to. A write drops the
// segments that hold the sectors it overwrites.
func (a *Array) takeHead(sp *spindle, start time.Time, op Op, local, n int64) {
	if sp.active >= 0 {
		g := &sp.segs[sp.active]
		g.held = g.fill(start, a.p.TransferMBs)
		if g.held > g.base {
			sp.head = g.held
		}
		sp.active = -1
	}
	if op != Write {
		return
	}
	kept := sp.segs[:0]
	for _, g := range sp.segs {
		if local+n <= g.low || local >= g.held {
			kept = append(kept, g)
		}
	}
	sp.segs = kept
}

// startReadAhead opens a segment after a read from the media: the head goes
// on reading from its end once the read is done, replacing the least
// recently used segment when the buffer is full.
func (a *Array) startReadAhead(sp *spindle, local, n int64, done time.Time) {
	g := segment{low: local, base: local + n, limit: local + n + a.p.ReadAheadBytes, since: done, held: -1, used: done}
	if len(sp.segs) < a.p.ReadAheadSegments {
		sp.segs = append(sp.segs, g)
		sp.active = len(sp.segs) - 1
		return
	}
	lru := 0
	for i := range sp.segs {
		if sp.segs[i].used.Before(sp.segs[lru].used) {
			lru = i
		}
	}
	sp.segs[lru] = g
	sp.active = lru
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
