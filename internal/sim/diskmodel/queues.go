package diskmodel

import (
	"sort"
	"time"
)

// destageDone is a cache destage completing: its bytes become free.
type destageDone struct {
	at    time.Time
	bytes int64
}

// destageBefore orders destages by completion time.
func destageBefore(a, b destageDone) bool { return a.at.Before(b.at) }

// calendar is the shared channel: sorted, non-overlapping busy intervals.
type calendar struct {
	busy []interval
}

type interval struct{ from, to time.Time }

// book reserves d at the earliest gap starting at or after at and returns
// the start of the reservation.
func (c *calendar) book(at time.Time, d time.Duration) time.Time {
	// First interval that ends after at.
	i := sort.Search(len(c.busy), func(i int) bool { return c.busy[i].to.After(at) })
	start := at
	for ; i < len(c.busy); i++ {
		if c.busy[i].from.After(start) && c.busy[i].from.Sub(start) >= d {
			break
		}
		if c.busy[i].to.After(start) {
			start = c.busy[i].to
		}
	}
	iv := interval{start, start.Add(d)}
	// Merge with neighbours that touch, to keep the calendar short.
	if i > 0 && c.busy[i-1].to.Equal(iv.from) {
		c.busy[i-1].to = iv.to
		if i < len(c.busy) && c.busy[i].from.Equal(iv.to) {
			c.busy[i-1].to = c.busy[i].to
			c.busy = append(c.busy[:i], c.busy[i+1:]...)
		}
		return start
	}
	if i < len(c.busy) && c.busy[i].from.Equal(iv.to) {
		c.busy[i].from = iv.from
		return start
	}
	c.busy = append(c.busy, interval{})
	copy(c.busy[i+1:], c.busy[i:])
	c.busy[i] = iv
	return start
}

// prune forgets intervals that ended before now: no later booking can use
// time before now.
func (c *calendar) prune(now time.Time) {
	i := sort.Search(len(c.busy), func(i int) bool { return c.busy[i].to.After(now) })
	if i > 0 {
		c.busy = append(c.busy[:0], c.busy[i:]...)
	}
}
