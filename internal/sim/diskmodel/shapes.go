package diskmodel

import (
	"math"
	"time"
)

// This file holds the mechanisms of the shapes beyond the thesis's RAID 0
// array: parity RAID with read-modify-write, a write-back cache that
// destages in the background, and the token buckets of a cloud volume.
// Each is off (zero) in the thesis-2010, ssd and ram profiles, whose
// timings do not change.

// pendingWrite is dirty data in a background-destaged cache, not yet
// handed to the spindles.
type pendingWrite struct {
	offset, length int64
	admitted       time.Time
}

// raidPiece is one stripe unit's part of a request on a parity array.
type raidPiece struct {
	row, unit     int64 // stripe row and data unit within it
	within, n     int64 // bytes within the unit
	spindle       int
	local         int64 // spindle-local offset
	parityA, parB int   // the row's parity spindles
}

// dataUnits is how many units of a stripe row hold data.
func (p Profile) dataUnits() int64 { return int64(p.Spindles - p.ParityDisks) }

// raidLayout maps a data unit to its spindle on a parity array: the
// parity units rotate, row r holding them on spindles (N-1-r) mod N and
// (N-r) mod N (left-symmetric for RAID-5; the second parity beside it),
// and the data units fill the other spindles in order after them.
func (p Profile) raidLayout(row, unit int64) (spindle, parA, parB int) {
	n := int64(p.Spindles)
	pa := int((n - 1 - row%n + n) % n)
	pb := -1
	first := int64(pa) + 1
	if p.ParityDisks >= 2 {
		pb = int((int64(pa) + 1) % n)
		first = int64(pa) + 2
	}
	return int((first + unit) % n), pa, pb
}

// raidPieces splits a request at stripe units over a parity array.
func (a *Array) raidPieces(offset, length int64) []raidPiece {
	p := a.p
	var out []raidPiece
	for length > 0 {
		u := offset / p.StripeBytes
		within := offset % p.StripeBytes
		n := min(length, p.StripeBytes-within)
		row, unit := u/p.dataUnits(), u%p.dataUnits()
		s, pa, pb := p.raidLayout(row, unit)
		out = append(out, raidPiece{row: row, unit: unit, within: within, n: n, spindle: s,
			local: row*p.StripeBytes + within, parityA: pa, parB: pb})
		offset += n
		length -= n
	}
	return out
}

// scheduleRAID books a request on a parity array and returns when its
// last operation completes. A read reads its data units. A write that
// covers whole stripe rows writes them, parity computed from the new
// data (every spindle writes one unit); any other part of a row is a
// read-modify-write: each data piece and each parity unit, over the
// bytes of the row the pieces touch, is read and rewritten (a small
// write on RAID-6 is six operations on three spindles, each a read and,
// a revolution later, a write of the same sectors; rmw). The controller
// never reads the rest of a row instead (reconstruct-write), which would
// be cheaper for a write covering most of a row.
func (a *Array) scheduleRAID(ready time.Time, op Op, offset, length int64, onPiece func(time.Time, int64)) time.Time {
	capacity := a.p.Capacity()
	offset %= capacity
	if offset < 0 {
		offset += capacity
	}
	done := ready
	note := func(end time.Time, n int64) {
		if end.After(done) {
			done = end
		}
		if onPiece != nil {
			onPiece(end, n)
		}
	}
	pieces := a.raidPieces(offset, length)
	if op == Read {
		for _, pc := range pieces {
			note(a.serve(pc.spindle, ready, Read, pc.local, pc.n), pc.n)
		}
		return done
	}
	d := a.p.dataUnits()
	for i := 0; i < len(pieces); {
		// The pieces of one row, and when the last of its operations ends.
		j := i
		var bytes int64
		for j < len(pieces) && pieces[j].row == pieces[i].row {
			bytes += pieces[j].n
			j++
		}
		row := pieces[i:j]
		rowEnd := ready
		at := func(end time.Time) {
			if end.After(rowEnd) {
				rowEnd = end
			}
		}
		if bytes == d*a.p.StripeBytes {
			// Full stripe: every spindle writes one unit, data or parity.
			base := row[0].row * a.p.StripeBytes
			for s := range a.p.Spindles {
				at(a.serve(s, ready, Write, base, a.p.StripeBytes))
			}
			a.stats.FullStripeWrites++
		} else {
			// Each data piece, then each parity unit once over the
			// bytes of the row the pieces touch.
			lo, hi := row[0].within, row[0].within+row[0].n
			for _, pc := range row {
				at(a.rmw(pc.spindle, ready, pc.local, pc.n))
				lo, hi = min(lo, pc.within), max(hi, pc.within+pc.n)
				a.stats.RMWWrites++
			}
			base := row[0].row * a.p.StripeBytes
			at(a.rmw(row[0].parityA, ready, base+lo, hi-lo))
			if row[0].parB >= 0 {
				at(a.rmw(row[0].parB, ready, base+lo, hi-lo))
			}
		}
		note(rowEnd, bytes)
		i = j
	}
	return done
}

// rmw is a read-modify-write of n bytes at local on spindle s: the read,
// then the write of the same sectors once the platter has turned back to
// them, one revolution after the read began transferring (without
// rotation, an SSD, a second operation at the same place).
func (a *Array) rmw(s int, ready time.Time, local, n int64) time.Time {
	read := a.serve(s, ready, Read, local, n)
	if a.revMs == 0 {
		return a.serve(s, read, Write, local, n)
	}
	sp := &a.spindles[s]
	xfer := ms(float64(n) / (a.p.TransferMBs * 1e3))
	end := read.Add(ms(a.revMs))
	if a.revMs*float64(time.Millisecond) < float64(xfer) {
		end = read.Add(xfer) // a piece longer than a track: its own transfer again
	}
	// The read's slot stays busy through the write.
	for i := range sp.slots {
		if sp.slots[i].Equal(read) {
			sp.slots[i] = end
			break
		}
	}
	a.stats.SpindleBusySum += end.Sub(read)
	sp.head = local + n
	if end.After(sp.idle) {
		sp.idle = end
	}
	return end
}

// writeBackLazy admits a write into a cache that destages in the
// background (Profile.DestageDepth > 0): the destager keeps DestageDepth
// destages at the spindles while dirty data waits, oldest first, merging
// contiguous dirty data up to CoalesceBytes into one destage (so that a
// sequential stream reaches a parity array as whole stripes). A read
// therefore queues behind the destages in progress, not behind all the
// dirty data; a write that finds the cache full waits until destages
// free room for it, which is the array's rate once the cache has filled.
func (a *Array) writeBackLazy(now time.Time, offset, length int64) time.Time {
	a.advanceDestage(now)
	admit := now
	if a.dirty+length > a.p.CacheBytes {
		a.stats.CacheWaits++
		// Run the destager forward until the write fits. The slots this
		// frees are filled once the write is in the cache (below), so
		// that it can join the data before it in one destage; only an
		// idle destager is restarted on the way.
		for a.dirty+length > a.p.CacheBytes && a.destage.Len() > 0 {
			d := a.destage.Pop()
			a.dirty -= d.bytes
			a.inDestage--
			if d.at.After(admit) {
				admit = d.at
			}
			if a.destage.Len() == 0 {
				a.startDestages(d.at)
			}
		}
	}
	a.dirty += length
	a.pending = append(a.pending, pendingWrite{offset: offset, length: length, admitted: admit})
	a.startDestages(admit)
	return admit.Add(ms(a.p.CacheAckMs))
}

// advanceDestage retires the destages finished by now, starting the next
// ones as each finishes, in time order.
func (a *Array) advanceDestage(now time.Time) {
	for a.destage.Len() > 0 && !a.destage.Items[0].at.After(now) {
		d := a.destage.Pop()
		a.dirty -= d.bytes
		a.inDestage--
		a.startDestages(d.at)
	}
}

// startDestages hands waiting dirty data to the spindles at t while fewer
// than DestageDepth destages are in progress.
func (a *Array) startDestages(t time.Time) {
	for a.inDestage < a.p.DestageDepth && a.pendHead < len(a.pending) {
		w := a.pending[a.pendHead]
		a.pendHead++
		// Merge what follows contiguously.
		for a.pendHead < len(a.pending) {
			nx := a.pending[a.pendHead]
			if nx.offset != w.offset+w.length || w.length+nx.length > a.p.CoalesceBytes {
				break
			}
			w.length += nx.length
			a.pendHead++
		}
		// On a parity array, a partial row at the end of a chunk that
		// holds whole rows waits in the cache for the rest of its row
		// (the stream's next write), as controllers hold it back rather
		// than read-modify-write it.
		if a.p.ParityDisks > 0 {
			rowBytes := a.p.dataUnits() * a.p.StripeBytes
			if a.pendHead == len(a.pending) && a.inDestage > 0 && (w.offset%rowBytes != 0 || w.length < rowBytes) &&
				(w.offset+w.length)/rowBytes == w.offset/rowBytes {
				// A lone partial row with the destager busy: wait for
				// the rest of the row.
				a.pendHead--
				a.pending[a.pendHead] = w
				break
			}
			if cut := (w.offset + w.length) / rowBytes * rowBytes; cut > w.offset && cut < w.offset+w.length &&
				(cut-w.offset)/rowBytes >= 1 && (w.offset%rowBytes == 0 || cut-w.offset >= rowBytes) {
				a.pendHead--
				a.pending[a.pendHead] = pendingWrite{offset: cut, length: w.offset + w.length - cut, admitted: w.admitted}
				w.length = cut - w.offset
			}
		}
		start := t
		if w.admitted.After(start) {
			start = w.admitted
		}
		end := a.scheduleAny(start, Write, w.offset, w.length, nil)
		a.destage.Push(destageDone{at: end, bytes: w.length})
		a.inDestage++
		a.stats.Destages++
	}
	if a.pendHead > 1024 && a.pendHead*2 > len(a.pending) {
		a.pending = append(a.pending[:0], a.pending[a.pendHead:]...)
		a.pendHead = 0
	}
}

// scheduleAny books a request on the array's layout.
func (a *Array) scheduleAny(ready time.Time, op Op, offset, length int64, onPiece func(time.Time, int64)) time.Time {
	if a.p.ParityDisks > 0 {
		return a.scheduleRAID(ready, op, offset, length, onPiece)
	}
	return a.schedule(ready, op, offset, length, onPiece)
}

// ioCost is how many I/Os a request counts as against IOPSCap: one per
// IOUnitBytes begun (a cloud volume counts a 1 MiB request as four of
// 256 KiB).
func (p Profile) ioCost(length int64) float64 {
	if p.IOUnitBytes <= 0 {
		return 1
	}
	return math.Max(1, math.Ceil(float64(length)/float64(p.IOUnitBytes)))
}

// admitCapped is when a request arriving at now passes the volume's token
// buckets (Profile.IOPSCap, ThroughputCapMBs), first come first served:
// each bucket refills at its rate up to its burst, and a request waits
// until both hold its cost. Kept as the buckets' theoretical arrival
// times (GCRA): a bucket is full when its tat is at or before now.
func (a *Array) admitCapped(now time.Time, length int64) time.Time {
	p := a.p
	admit := now
	gate := func(tat *time.Time, cost, rate, burst float64) {
		if rate <= 0 {
			return
		}
		if tat.Before(now) {
			*tat = now
		}
		// The bucket holds burst: a request may go when its cost, added
		// to the debt, stays within the burst.
		tol := time.Duration((burst - cost) / rate * float64(time.Second))
		if at := tat.Add(-max(tol, 0)); at.After(admit) {
			admit = at
		}
	}
	cost := p.ioCost(length)
	gate(&a.tatIO, cost, p.IOPSCap, math.Max(p.IOPSBurst, cost))
	bytesPerSec := p.ThroughputCapMBs * 1e6
	gate(&a.tatBytes, float64(length), bytesPerSec, math.Max(float64(p.ThroughputBurstBytes), float64(length)))
	// Both buckets pay at the admission.
	if p.IOPSCap > 0 {
		a.tatIO = a.tatIO.Add(time.Duration(cost / p.IOPSCap * float64(time.Second)))
	}
	if bytesPerSec > 0 {
		a.tatBytes = a.tatBytes.Add(time.Duration(float64(length) / bytesPerSec * float64(time.Second)))
	}
	// First come, first served (each bucket's admissions already are in
	// order, so their maximum is; this keeps it so under rounding).
	if a.lastAdmit.After(admit) {
		admit = a.lastAdmit
	}
	a.lastAdmit = admit
	if admit.After(now) {
		a.stats.CapWaits++
	}
	return admit
}
