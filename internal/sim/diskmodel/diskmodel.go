// Package diskmodel is a timing model of a striped disk array: it says when
// a request submitted at some instant completes. The simulator drives it in
// virtual time and the lab's emulated disk (internal/lab/diskemu) in real time,
// so that a laptop disk behaves like the ten 10k rpm SCSI disks of the
// thesis lab, whose queueing is what makes writers hurt readers.
//
// # Model
//
// The array address space is striped over Spindles disks in units of
// StripeBytes (RAID 0, like the thesis's LVM volumes striped over ten disks
// with 64 KiB stripes). A request is split at stripe boundaries; each piece
// is one operation on one spindle, and the request completes when its last
// piece does.
//
// Each spindle serves its operations first come, first served. FIFO rather
// than an elevator because completion times are computed when a request is
// submitted: with FIFO a later arrival never changes an earlier request's
// completion, so Submit can answer at once and the answer stays true. (The
// thesis target flushed its write-back data ahead of the reads queued
// behind it; FIFO is also what makes a read wait behind writes there.)
//
// The service time of an operation is
//
//	CommandOverheadMs + seek + rotational latency + transfer
//
// where seek is zero when the operation starts where the spindle's previous
// one ended (sequential access, detected per spindle) and otherwise grows
// with the square root of the distance from TrackToTrackMs to a full-stroke
// time chosen so that the mean over random distances is AvgSeekMs.
// Rotational latency is uniform in [0, one revolution) from a seeded random
// source, except for a sequential operation that starts the moment the
// previous one finished (the head is already at the sector: streaming).
// Transfer moves the bytes at TransferMBs (media rate).
//
// All transfers also cross one shared channel of BusMBs (the SCSI bus or the
// controller's host link). The channel is a calendar of busy intervals: a
// transfer takes the earliest free gap of its length once its spindle has
// positioned. On the thesis hardware this channel is the bottleneck for
// writes: ten disks behind one Ultra Wide SCSI adapter (40 MB/s) is why 12
// sequential writers reach only 37–39 MB/s in aggregate.
//
// With ReadAheadBytes > 0 each spindle reads ahead (look-ahead into its
// segmented buffer, as every SCSI disk of the thesis's generation did): after
// a read that had to go to the media, the spindle keeps reading the sectors
// that follow at media rate into a buffer segment, while it has nothing else
// to do, until it is ReadAheadBytes past the host's last read of that
// segment. The head is taken for the next operation that needs the media,
// and the segment keeps what it has. A read that lies within a segment is
// served from the buffer: CommandOverheadMs and its transfer over the
// channel, no positioning and no media time; one just beyond what the
// active segment has read waits for the media to get there (streaming).
// The buffer holds ReadAheadSegments segments, the least recently used
// giving way. This is what lets sequential readers run at the channel's
// rate (thesis Fig. 5.1: four readers share ~38 MB/s; Fig. 5.5: one reads
// 22 MB/s) while a random reader still pays seek and rotation each time.
//
// With CacheBytes > 0 the array has a write-back cache: a write is
// acknowledged as soon as it fits in the cache (after CacheAckMs) and its
// destage to the spindles is queued at that moment; when the cache is full a
// write waits until enough destages complete. Reads bypass the cache and
// queue behind the destages on their spindle, which is how a few megabytes
// of dirty data make an 8 KiB random read wait 30–120 ms (thesis Fig. 5.7).
// Prefill (warm.go) starts the cache holding dirty data, as an array under
// sustained writes has it, rather than empty.
//
// Profile "ram" has no service time at all: Submit returns now.
//
// Two shapes beyond the thesis's (shapes.go): profile "raid6-hdd" lays
// the stripe units out as RAID-6 (ParityDisks), so that a write that does
// not cover whole rows reads and rewrites its data and both parities, and
// its 1 GiB cache destages in the background (DestageDepth), so that a
// read waits for the destages in progress rather than for all the dirty
// data, and writes slow to the array's rate only once the cache has
// filled. Profile "cloud-3000" is a volume behind IOPS and throughput
// caps: token buckets with a burst that every request passes, first come
// first served, before a fast back end with a latency floor.
package diskmodel

import (
	"fmt"
	"math"
	"math/rand"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/minheap"
)

// Op is the direction of a request.
type Op int

// The two directions a request can have.
const (
	Read Op = iota
	Write
)

func (o Op) String() string {
	if o == Write {
		return "write"
	}
	return "read"
}

// Profile describes an array. Times are in milliseconds, rates in MB/s
// (10^6 bytes per second), sizes in bytes.
type Profile struct {
	Name string
	// Spindles is the number of disks (or independent channels of an SSD).
	Spindles int
	// StripeBytes is the stripe unit: consecutive units go to consecutive
	// spindles.
	StripeBytes int64
	// DiskBytes is the capacity of one spindle; seek distances are taken
	// relative to it and offsets beyond the array's capacity wrap.
	DiskBytes int64
	// RPM is the rotation speed; 0 means no rotational latency (SSD).
	RPM float64
	// AvgSeekMs is the mean seek over random distances; TrackToTrackMs the
	// shortest non-zero seek.
	AvgSeekMs, TrackToTrackMs float64
	// TransferMBs is the media rate of one spindle.
	TransferMBs float64
	// BusMBs is the rate of the channel shared by all spindles; 0 means no
	// shared limit.
	BusMBs float64
	// CommandOverheadMs is the fixed cost of each operation (controller,
	// command decode, flash read time for an SSD).
	CommandOverheadMs float64
	// WriteOverheadMs is added to CommandOverheadMs for writes (flash
	// program time); zero for disks.
	WriteOverheadMs float64
	// QueueDepth is how many operations a spindle serves at once (tagged
	// command queueing, flash dies behind one channel). Disks serve one at
	// a time; an SSD channel overlaps several.
	QueueDepth int
	// ReadAheadBytes is how far a spindle reads past a read into its buffer
	// while idle; 0 means no look-ahead.
	ReadAheadBytes int64
	// ReadAheadSegments is how many read-ahead streams one spindle's buffer
	// holds at once.
	ReadAheadSegments int
	// CacheBytes is the write-back cache; 0 means write-through.
	CacheBytes int64
	// CacheAckMs is the latency of a write acknowledged from the cache.
	CacheAckMs float64
	// NoLatency makes every request complete at once (profile "ram").
	NoLatency bool

	// ParityDisks is how many units of each stripe row hold parity: 0 is
	// RAID 0, 1 RAID-5, 2 RAID-6. With parity, a write that does not
	// cover whole rows is a read-modify-write of each data unit it
	// touches and of the row's parity units (shapes.go).
	ParityDisks int
	// DestageDepth, with a write-back cache, makes the cache destage in
	// the background, this many destages at the spindles at a time,
	// oldest dirty data first; 0 queues each write's destage at the
	// spindles when the write is admitted (the thesis profile's model).
	DestageDepth int
	// CoalesceBytes is the most contiguous dirty data one background
	// destage merges (whole stripes for a sequential stream).
	CoalesceBytes int64

	// IOPSCap and ThroughputCapMBs are a cloud volume's provisioned
	// rates, each a token bucket holding IOPSBurst I/Os and
	// ThroughputBurstBytes bytes; a request waits, first come first
	// served, until both hold its cost. 0: no cap. A request counts as
	// one I/O per IOUnitBytes begun (0: one I/O whatever its size).
	IOPSCap, IOPSBurst   float64
	IOUnitBytes          int64
	ThroughputCapMBs     float64
	ThroughputBurstBytes int64
}

// Validate says what is wrong with a profile.
func (p Profile) Validate() error {
	if p.NoLatency {
		return nil
	}
	switch {
	case p.Spindles <= 0:
		return fmt.Errorf("profile %q: spindles must be > 0", p.Name)
	case p.StripeBytes <= 0:
		return fmt.Errorf("profile %q: stripe must be > 0 bytes", p.Name)
	case p.DiskBytes <= 0:
		return fmt.Errorf("profile %q: disk size must be > 0 bytes", p.Name)
	case p.TransferMBs <= 0:
		return fmt.Errorf("profile %q: transfer rate must be > 0 MB/s", p.Name)
	case p.RPM < 0 || p.AvgSeekMs < 0 || p.TrackToTrackMs < 0 || p.BusMBs < 0 ||
		p.CommandOverheadMs < 0 || p.WriteOverheadMs < 0 || p.CacheBytes < 0 || p.CacheAckMs < 0 ||
		p.ReadAheadBytes < 0 || p.ReadAheadSegments < 0 || p.ParityDisks < 0 || p.DestageDepth < 0 ||
		p.CoalesceBytes < 0 || p.IOPSCap < 0 || p.IOPSBurst < 0 || p.IOUnitBytes < 0 ||
		p.ThroughputCapMBs < 0 || p.ThroughputBurstBytes < 0:
		return fmt.Errorf("profile %q: times, rates and sizes must not be negative", p.Name)
	case p.ParityDisks > 2:
		return fmt.Errorf("profile %q: at most 2 parity units a row (RAID-6)", p.Name)
	case p.ParityDisks > 0 && p.Spindles <= p.ParityDisks:
		return fmt.Errorf("profile %q: %d parity units need more than %d spindles", p.Name, p.ParityDisks, p.Spindles)
	case p.DestageDepth > 0 && p.CacheBytes == 0:
		return fmt.Errorf("profile %q: background destage needs a write-back cache", p.Name)
	case p.ReadAheadBytes > 0 && p.ReadAheadSegments == 0:
		return fmt.Errorf("profile %q: read-ahead needs at least one buffer segment", p.Name)
	case p.AvgSeekMs > 0 && p.TrackToTrackMs > p.AvgSeekMs:
		return fmt.Errorf("profile %q: track-to-track seek exceeds the average seek", p.Name)
	}
	return nil
}

// Capacity is the size of the array's address space in bytes.
func (p Profile) Capacity() int64 {
	if p.NoLatency {
		return p.DiskBytes
	}
	return int64(p.Spindles-p.ParityDisks) * p.DiskBytes
}

// meanSqrtRandomDistance is E[sqrt(X)] for the distance X between two
// uniformly random positions on [0,1] (density 2(1-x)): 8/15. It turns the
// average seek into the full-stroke seek of the sqrt curve.
const meanSqrtRandomDistance = 8.0 / 15.0

// Array is a running model. It is safe for concurrent use; callers should
// pass non-decreasing times, and a time earlier than one already seen is
// treated as that later time.
type Array struct {
	p          Profile
	fullSeekMs float64
	revMs      float64

	mu       sync.Mutex
	rng      *rand.Rand
	last     time.Time // latest submission time seen
	spindles []spindle
	bus      calendar
	dirty    int64
	destage  minheap.Heap[destageDone]
	stats    Stats
	// Background destage (Profile.DestageDepth): dirty data not yet at
	// the spindles, from pendHead on, and the destages in progress.
	pending   []pendingWrite
	pendHead  int
	inDestage int
	// The cloud volume's token buckets (admitCapped).
	tatIO, tatBytes, lastAdmit time.Time
}

type spindle struct {
	// slots[i] is when the i-th of QueueDepth service slots becomes free.
	slots []time.Time
	head  int64     // spindle-local byte offset after the last operation
	idle  time.Time // when the last operation finished
	// segs is the read-ahead buffer; active is the segment the head is
	// still filling, -1 when the head was taken for something else.
	segs   []segment
	active int
}

// New returns an array with the given profile; seed makes rotational
// latencies reproducible. It panics on an invalid profile (check
// Profile.Validate first for profiles from user input).
func New(p Profile, seed int64) *Array {
	if err := p.Validate(); err != nil {
		panic(err)
	}
	a := &Array{p: p, rng: rand.New(rand.NewSource(seed)), destage: minheap.New(destageBefore)}
	if p.NoLatency {
		return a
	}
	qd := max(p.QueueDepth, 1)
	a.spindles = make([]spindle, p.Spindles)
	for i := range a.spindles {
		a.spindles[i].slots = make([]time.Time, qd)
		a.spindles[i].active = -1
	}
	if p.AvgSeekMs > 0 {
		a.fullSeekMs = p.TrackToTrackMs + (p.AvgSeekMs-p.TrackToTrackMs)/meanSqrtRandomDistance
	}
	if p.RPM > 0 {
		a.revMs = 60000 / p.RPM
	}
	return a
}

// Profile returns the array's profile.
func (a *Array) Profile() Profile { return a.p }

// Capacity is the size of the array's address space: give each LUN its own
// region of it (e.g. region i of n starts at i·Capacity()/n, rounded to the
// stripe) so LUNs seek against each other like LVs of one volume group.
func (a *Array) Capacity() int64 { return a.p.Capacity() }

// Stats counts what the array did, for tests and reports.
type Stats struct {
	Reads, Writes           int64
	ReadBytes, WriteBytes   int64
	Ops, SequentialOps      int64 // spindle operations; those without seek
	CacheWaits              int64 // writes that found the cache full
	ReadAheadHits           int64 // spindle reads served from the read-ahead buffer
	BusBusy, SpindleBusySum time.Duration
	// Parity arrays: rows written whole, unit pieces read-modify-written;
	// background destages started; requests the caps held back.
	FullStripeWrites, RMWWrites int64
	Destages                    int64
	CapWaits                    int64
}

// Stats returns a copy of the counters.
func (a *Array) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Submit schedules one request arriving at now and returns when it
// completes. offset and length are bytes in the array's address space
// (callers give each LUN its own region). stream names the requester; the
// model ignores it on purpose, since sequential detection is per spindle,
// as a disk sees it, not per stream.
func (a *Array) Submit(now time.Time, op Op, offset, length int64, stream uint64) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	if op == Write {
		a.stats.Writes++
		a.stats.WriteBytes += length
	} else {
		a.stats.Reads++
		a.stats.ReadBytes += length
	}
	if a.p.NoLatency || length <= 0 {
		return now
	}
	if now.Before(a.last) {
		now = a.last
	}
	a.last = now
	a.bus.prune(now)
	if a.p.IOPSCap > 0 || a.p.ThroughputCapMBs > 0 {
		now = a.admitCapped(now, length)
	}

	if op == Write && a.p.CacheBytes > 0 {
		if a.p.DestageDepth > 0 {
			return a.writeBackLazy(now, offset, length)
		}
		return a.writeBack(now, offset, length)
	}
	if a.p.DestageDepth > 0 {
		a.advanceDestage(now) // the spindles as the destager left them
	}
	return a.scheduleAny(now, op, offset, length, nil)
}

// writeBack admits a write into the cache, waiting for destages when it is
// full, and queues its destage.
func (a *Array) writeBack(now time.Time, offset, length int64) time.Time {
	for a.destage.Len() > 0 && !a.destage.Items[0].at.After(now) {
		a.dirty -= a.destage.Pop().bytes
	}
	admit := now
	if a.dirty+length > a.p.CacheBytes {
		a.stats.CacheWaits++
	}
	for a.dirty+length > a.p.CacheBytes && a.destage.Len() > 0 {
		d := a.destage.Pop()
		a.dirty -= d.bytes
		if d.at.After(admit) {
			admit = d.at
		}
	}
	a.dirty += length
	a.scheduleAny(admit, Write, offset, length, func(done time.Time, n int64) {
		a.destage.Push(destageDone{at: done, bytes: n})
	})
	return admit.Add(ms(a.p.CacheAckMs))
}

// schedule splits a request into stripe pieces, books each on its spindle
// and returns the completion of the last. onPiece, when set, learns each
// piece's completion.
func (a *Array) schedule(ready time.Time, op Op, offset, length int64, onPiece func(time.Time, int64)) time.Time {
	capacity := a.p.Capacity()
	offset %= capacity
	if offset < 0 {
		offset += capacity
	}
	done := ready
	for length > 0 {
		unit := offset / a.p.StripeBytes
		within := offset % a.p.StripeBytes
		n := min(length, a.p.StripeBytes-within)
		s := int(unit % int64(a.p.Spindles))
		local := (unit/int64(a.p.Spindles))*a.p.StripeBytes + within
		end := a.serve(s, ready, op, local, n)
		if onPiece != nil {
			onPiece(end, n)
		}
		if end.After(done) {
			done = end
		}
		offset = (offset + n) % capacity
		length -= n
	}
	return done
}

// serve books one operation on spindle s and returns its completion.
func (a *Array) serve(s int, ready time.Time, op Op, local, n int64) time.Time {
	sp := &a.spindles[s]
	slot := 0
	for i := range sp.slots {
		if sp.slots[i].Before(sp.slots[slot]) {
			slot = i
		}
	}
	start := ready
	if sp.slots[slot].After(start) {
		start = sp.slots[slot]
	}
	a.stats.Ops++
	if op == Read && a.p.ReadAheadBytes > 0 {
		if end, ok := a.readBuffered(sp, slot, start, local, n); ok {
			return end
		}
	}
	a.takeHead(sp, start, op, local, n)
	pos := a.p.CommandOverheadMs
	if op == Write {
		pos += a.p.WriteOverheadMs
	}
	sequential := local == sp.head
	if sequential {
		a.stats.SequentialOps++
	} else {
		pos += a.seekMs(abs64(local - sp.head))
	}
	// A sequential operation that starts as the previous one ends finds
	// its sector under the head; anything else waits for the platter.
	if a.revMs > 0 && !(sequential && !start.After(sp.idle)) {
		pos += a.rng.Float64() * a.revMs
	}
	positioned := start.Add(ms(pos))
	media := ms(float64(n) / (a.p.TransferMBs * 1e3))
	end := positioned.Add(media)
	if a.p.BusMBs > 0 {
		busD := ms(float64(n) / (a.p.BusMBs * 1e3))
		a.stats.BusBusy += busD
		if op == Write {
			// A disk takes a write's data into its buffer while it seeks
			// (SCSI disconnect), then writes it to the media.
			busEnd := a.bus.book(start, busD).Add(busD)
			if busEnd.After(positioned) {
				end = busEnd.Add(media)
			}
		} else if busEnd := a.bus.book(positioned, busD).Add(busD); busEnd.After(end) {
			// A read's data crosses the channel once the head is there;
			// it ends when both the media and the channel are done.
			end = busEnd
		}
	}
	a.stats.SpindleBusySum += end.Sub(start)
	sp.slots[slot] = end
	sp.head = local + n
	if end.After(sp.idle) {
		sp.idle = end
	}
	if op == Read && a.p.ReadAheadBytes > 0 {
		a.startReadAhead(sp, local, n, end)
	}
	return end
}

// seekMs is the seek time over d bytes of one spindle.
func (a *Array) seekMs(d int64) float64 {
	if a.fullSeekMs == 0 || d == 0 {
		return 0
	}
	f := math.Min(float64(d)/float64(a.p.DiskBytes), 1)
	return a.p.TrackToTrackMs + (a.fullSeekMs-a.p.TrackToTrackMs)*math.Sqrt(f)
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
