package diskmodel

import "time"

// Prefill puts length bytes at offset into the write-back cache as dirty
// data written at now, before the run being modelled: an array that has
// been under writes for a while starts with its cache at that load's
// steady state, not empty. The bytes destage from now on exactly as a
// write admitted at now would (in the background, oldest first, or at
// once without DestageDepth), so reads queue behind their destages and
// later writes find the room they leave. They are not counted in Stats
// as writes. Prefill reports false, and adds nothing, when the array has
// no write-back cache or the bytes do not fit in it at now: a warm start
// never waits.
func (a *Array) Prefill(now time.Time, offset, length int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p.NoLatency || a.p.CacheBytes == 0 || length <= 0 {
		return false
	}
	if now.Before(a.last) {
		now = a.last
	}
	a.last = now
	a.bus.prune(now)
	a.retireDestages(now)
	if a.dirty+length > a.p.CacheBytes {
		return false
	}
	a.dirty += length
	if a.p.DestageDepth > 0 {
		a.pending = append(a.pending, pendingWrite{offset: offset, length: length, admitted: now})
		a.startDestages(now)
		return true
	}
	a.scheduleAny(now, Write, offset, length, func(done time.Time, n int64) {
		a.destage.Push(destageDone{at: done, bytes: n})
	})
	return true
}

// Dirty is how many bytes the write-back cache holds at now that have
// not reached the spindles yet (destages in progress included).
func (a *Array) Dirty(now time.Time) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p.CacheBytes == 0 || now.Before(a.last) {
		return a.dirty
	}
	a.last = now
	a.retireDestages(now)
	return a.dirty
}

// retireDestages takes the destages finished by now out of the dirty
// bytes (starting the next background ones as each finishes).
func (a *Array) retireDestages(now time.Time) {
	if a.p.DestageDepth > 0 {
		a.advanceDestage(now)
		return
	}
	for a.destage.Len() > 0 && !a.destage.Items[0].at.After(now) {
		a.dirty -= a.destage.Pop().bytes
	}
}
