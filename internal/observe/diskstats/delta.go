package diskstats

import "time"

// Delta is what happened on a device between two snapshots.
type Delta struct {
	ReadIOs, ReadSectors, ReadTicks    uint64
	WriteIOs, WriteSectors, WriteTicks uint64
	// Reset is set when a counter went backwards in a way no wrap
	// explains: the device was re-created (a loop device re-attached, a
	// dm table replaced) and its counters restarted from zero. The
	// counters are then all zero and Rates gives none: the caller takes
	// cur as its new baseline and measures from the next snapshot on.
	Reset bool
}

// maxWrapStep bounds the growth a 32-bit wrap may imply in one interval.
// 2^28 is 128 GiB of sectors, 2^28 I/Os, or 74 hours of I/O time summed
// over one interval (a tick is 100 ms): no device does that, while a
// counter that restarted from zero after being anywhere but the last
// 2^28 below 2^32 implies more. So a backwards step is a wrap only when
// prev was within maxWrapStep of 2^32 and cur is small.
const maxWrapStep = 1 << 28

// CounterDelta returns how much a counter grew from prev to cur, and false
// when it went backwards in a way that is not a wrap (a reset). The
// kernel's counters are unsigned long (32 bits on 32-bit kernels) and the
// time fields unsigned int: a 32-bit wrap is real (the ms counters wrap
// after 49.7 days of I/O time), a 64-bit one never happens.
func CounterDelta(cur, prev uint64) (uint64, bool) {
	if cur >= prev {
		return cur - prev, true
	}
	if prev < 1<<32 {
		if step := (1<<32 - prev) + cur; step < maxWrapStep {
			return step, true
		}
	}
	return 0, false
}

// Counter returns how much a counter grew from prev to cur: 0 across a
// reset (see CounterDelta).
func Counter(cur, prev uint64) uint64 {
	d, _ := CounterDelta(cur, prev)
	return d
}

// Sub returns the growth of cur's counters since prev. If any counter
// reset, the whole Delta is a reset: the kernel restarts all counters of
// a re-created device together, and a partial delta would mix two
// devices.
func Sub(cur, prev *Stat) Delta {
	var d Delta
	ok := true
	step := func(c, p uint64) uint64 {
		v, good := CounterDelta(c, p)
		ok = ok && good
		return v
	}
	d.ReadIOs = step(cur.ReadIOs, prev.ReadIOs)
	d.ReadSectors = step(cur.ReadSectors, prev.ReadSectors)
	d.ReadTicks = step(cur.ReadTicks, prev.ReadTicks)
	d.WriteIOs = step(cur.WriteIOs, prev.WriteIOs)
	d.WriteSectors = step(cur.WriteSectors, prev.WriteSectors)
	d.WriteTicks = step(cur.WriteTicks, prev.WriteTicks)
	if !ok {
		return Delta{Reset: true}
	}
	return d
}

// Rates are a Delta's per-interval derived values, as iostat shows them.
type Rates struct {
	Reads    uint64  // reads completed in the interval
	ReadMs   uint64  // milliseconds spent by those reads
	RAwaitMs float64 // ReadMs / Reads: mean read latency; 0 when no reads
	Writes   uint64
	WriteMs  uint64
	// WAwaitMs is WriteMs / Writes; 0 when no writes.
	WAwaitMs              float64
	WriteSectorsPerSecond float64
	// ReadKBs and WriteKBs are in kB/s with kB = 1024 bytes (two sectors),
	// as iostat -k prints them.
	ReadKBs, WriteKBs float64
}

// Rates derives per-interval values over elapsed, the real time between
// the two snapshots. A non-positive elapsed gives zero rates (counts and
// awaits are still filled in); a reset gives none at all.
func (d Delta) Rates(elapsed time.Duration) Rates {
	if d.Reset {
		return Rates{}
	}
	r := Rates{Reads: d.ReadIOs, ReadMs: d.ReadTicks, Writes: d.WriteIOs, WriteMs: d.WriteTicks}
	if d.ReadIOs > 0 {
		r.RAwaitMs = float64(d.ReadTicks) / float64(d.ReadIOs)
	}
	if d.WriteIOs > 0 {
		r.WAwaitMs = float64(d.WriteTicks) / float64(d.WriteIOs)
	}
	if elapsed > 0 {
		sec := elapsed.Seconds()
		r.WriteSectorsPerSecond = float64(d.WriteSectors) / sec
		r.ReadKBs = float64(d.ReadSectors) / 2 / sec
		r.WriteKBs = float64(d.WriteSectors) / 2 / sec
	}
	return r
}
