package diskstats

import "time"

// Delta is what happened on a device between two snapshots.
type Delta struct {
	ReadIOs, ReadSectors, ReadTicks    uint64
	WriteIOs, WriteSectors, WriteTicks uint64
}

// Counter returns how much a counter grew from prev to cur. A counter
// that went backwards wrapped: at 2^32 when prev fits in 32 bits (the
// kernel's counters are unsigned long, 32 bits on 32-bit kernels, and
// some are unsigned int), else at 2^64.
func Counter(cur, prev uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	if prev < 1<<32 {
		return (1<<32 - prev) + cur
	}
	return cur - prev // modulo 2^64: (2^64 − prev) + cur
}

// Sub returns the growth of cur's counters since prev.
func Sub(cur, prev *Stat) Delta {
	return Delta{
		ReadIOs:      Counter(cur.ReadIOs, prev.ReadIOs),
		ReadSectors:  Counter(cur.ReadSectors, prev.ReadSectors),
		ReadTicks:    Counter(cur.ReadTicks, prev.ReadTicks),
		WriteIOs:     Counter(cur.WriteIOs, prev.WriteIOs),
		WriteSectors: Counter(cur.WriteSectors, prev.WriteSectors),
		WriteTicks:   Counter(cur.WriteTicks, prev.WriteTicks),
	}
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
// awaits are still filled in).
func (d Delta) Rates(elapsed time.Duration) Rates {
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
