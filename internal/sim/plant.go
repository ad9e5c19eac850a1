package sim

import (
	"fmt"
	"math/rand"
	"net/netip"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// counters are one device's cumulative /proc/diskstats counters, kept in
// float milliseconds and printed rounded down, as the kernel accumulates.
type counters struct {
	reads, readSectors   uint64
	writes, writeSectors uint64
	readMs, writeMs      float64
	inFlight             int
	readsInFlight        uint64
	// tickReads are the reads completed since the engine's last sample
	// (the block-layer probe's tick); readArrived the arrival of each read
	// in flight, by id.
	tickReads        latency.Ops
	readArrived      map[uint64]time.Time
	ioMs, weightedMs float64
	busySince        time.Time
	lastChange       time.Time
}

// account moves the in-flight based counters (io_ticks, time_in_queue) up
// to now before the number in flight changes.
func (c *counters) account(now time.Time) {
	if c.inFlight > 0 {
		d := float64(now.Sub(c.lastChange)) / float64(time.Millisecond)
		c.ioMs += d
		c.weightedMs += d * float64(c.inFlight)
	}
	c.lastChange = now
}

// event kinds of the plant.
type kind int

const (
	evTick      kind = iota // controller tick: snapshot diskstats, step the engine
	evArrive                // an I/O reaches the target and is submitted to the array
	evComplete              // the array completes an I/O: device counters move
	evResponse              // the initiator has the response: issue the next I/O
	evBurst                 // writers switch on
	evReadIssue             // the reader's pacing wait is over
	evEnd                   // end of the run
)

type event struct {
	at    time.Time
	seq   uint64 // FIFO among equal times, for determinism
	kind  kind
	actor int // thread index; -1 reader
	io    ioReq
}

type ioReq struct {
	id      uint64 // for the reads in flight of the probe
	op      diskmodel.Op
	offset  int64
	length  int64
	arrived time.Time
	issued  time.Time
	device  int
}

// eventQueue is a binary min-heap of events by (at, seq), typed rather
// than through container/heap: boxing each event in an interface cost an
// allocation per event, a third of a flash run's time.
type eventQueue []event

func (q eventQueue) Len() int { return len(q) }

func (q eventQueue) less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		up := (i - 1) / 2
		if !h.less(i, up) {
			break
		}
		h[i], h[up] = h[up], h[i]
		i = up
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	*q = h
	return top
}

// thread is one writer thread: one connection to its device.
type thread struct {
	device int
	base   int64 // start of its region of the array
	pos    int64 // next offset within the region
	left   int64 // bytes left in this burst
	limit  int64 // size of the region: pos wraps here
	// inflight is its writes outstanding (up to Scenario.WriteIODepth);
	// lastResp the latest response it was sent, which a later one may
	// not overtake; unacked its window's data not yet acknowledged.
	inflight int
	lastResp time.Time
	unacked  []ackAt
	inWindow int64
	bursts   int // bursts begun
}

// plant is the simulated storage system: array, initiators, throttle.
type plant struct {
	sc      Scenario
	start   time.Time
	array   *diskmodel.Array
	rng     *rand.Rand
	q       eventQueue
	seq     uint64
	dev     []counters
	threads []thread
	// running counts, per burst group, the writer threads still in their
	// burst: one group for all threads, or one per writer device with
	// Scenario.PerHostBursts.
	running []int
	active  bool
	// readers are the scenario's readers, in device order; reader k is
	// the events' actor -1-k.
	readers    []reader
	writersEnd time.Time // the writers stop here (zero: never)
	ioSeq      uint64
	delayMs    float64 // current packet delay for throttled consumers
	throttled  map[netip.Addr]bool
	// armed consumers are held at armedMs once they have written
	// (joined), as the kernel's arming rule puts them in the set.
	armedMs float64
	armed   map[netip.Addr]bool
	joined  map[netip.Addr]bool
	// own are consumers held at their own delay (engine "Tenants"),
	// whatever the set's.
	own map[netip.Addr]float64

	// warmRNG places the warm cache's dirty data (Scenario.WarmCacheBytes),
	// a source of its own so that the reads and writes of a warm run are
	// those of the cold one; nil once the cache is warmed (or cold).
	warmRNG *rand.Rand

	// Observations for the per-second samples.
	obs observer
}

// observer accumulates what the run reports.
type observer struct {
	readLatSum float64 // ms, reads completed this second
	readCount  int
	readBytes  int64
	writeBytes int64 // acknowledged at the target this second
	// perReader and devWrite split the second by reader and by writer
	// device (nil until the first read or write).
	perReader    []readSum
	devWrite     []int64
	activeSecond bool
	writeLatSum  float64
	writeCount   int
}

func newPlant(sc Scenario, start time.Time, seed int64) (*plant, error) {
	if err := sc.Disk.Validate(); err != nil {
		return nil, err
	}
	if sc.WarmCacheBytes < 0 || sc.WarmCacheBytes > sc.Disk.CacheBytes {
		return nil, fmt.Errorf("scenario %s: warm cache of %d bytes, want 0 to the disk's cache (%d)", sc.Name, sc.WarmCacheBytes, sc.Disk.CacheBytes)
	}
	p := &plant{
		sc: sc, start: start,
		array:     diskmodel.New(sc.Disk, seed),
		rng:       rand.New(rand.NewSource(seed ^ 0x5a5a)),
		dev:       make([]counters, len(sc.Devices)),
		throttled: map[netip.Addr]bool{},
		own:       map[netip.Addr]float64{},
		armed:     map[netip.Addr]bool{},
		joined:    map[netip.Addr]bool{},
	}
	for i, d := range sc.Devices {
		p.dev[i].lastChange = start
		if d.Reader {
			bps := sc.ReaderBps
			if d.ReadBps > 0 {
				bps = d.ReadBps
			}
			p.readers = append(p.readers, reader{dev: i, bps: bps, turn: d.Turn})
		}
		region := sc.LUNBytes / int64(max(d.Threads, 1))
		region -= region % sc.WriteBytes
		for t := range d.Threads {
			// Each thread writes its own part of the device.
			p.threads = append(p.threads, thread{device: i, base: int64(i)*sc.LUNStride + int64(t)*region, limit: region})
		}
	}
	if sc.WarmCacheBytes > 0 {
		p.warmRNG = rand.New(rand.NewSource(seed ^ 0x3c3c))
	}
	if len(p.readers) == 0 {
		return nil, fmt.Errorf("scenario %s: no reader", sc.Name)
	}
	p.running = make([]int, len(sc.Devices))
	if sc.PerHostBursts && sc.HostStagger > 0 {
		k := 0
		for i, d := range sc.Devices {
			if d.Threads > 0 {
				p.push(event{at: start.Add(sc.Start + time.Duration(k)*sc.HostStagger), kind: evBurst, actor: i})
				k++
			}
		}
	} else {
		p.push(event{at: start.Add(sc.Start), kind: evBurst, actor: -1})
	}
	for k := range p.readers {
		if p.readers[k].turn.on(start.Sub(start)) {
			p.issueRead(start, k)
		} else {
			p.readers[k].next = start
		}
		p.readerMore(k)
	}
	return p, nil
}

// group is the burst group of writer thread t: the barrier its burst
// waits on.
func (p *plant) group(t int) int {
	if p.sc.PerHostBursts {
		return p.threads[t].device
	}
	return 0
}

// stopped says whether the writers' time is over at now (Scenario.Tail).
func (p *plant) stopped(now time.Time) bool {
	return !p.writersEnd.IsZero() && !now.Before(p.writersEnd)
}

func (p *plant) push(e event) {
	p.seq++
	e.seq = p.seq
	p.q.push(e)
}

func msDur(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// delayFor is the packet delay a consumer's packets get right now.
func (p *plant) delayFor(dev int) time.Duration {
	a := p.sc.Devices[dev].Addr
	if d, ok := p.own[a]; ok {
		return msDur(d)
	}
	switch {
	case p.delayMs > 0 && p.throttled[a]:
		return msDur(p.delayMs)
	case p.armedMs > 0 && p.joined[a]:
		return msDur(p.armedMs)
	}
	return 0
}

// snapshot renders the devices' counters as /proc/diskstats text (the
// 20-field format of kernel 5.5+).
func (p *plant) snapshot(now time.Time, b *strings.Builder) {
	b.Reset()
	for i, d := range p.sc.Devices {
		c := &p.dev[i]
		c.account(now)
		fmt.Fprintf(b, " 253 %7d %s %d 0 %d %d %d 0 %d %d %d %d %d 0 0 0 0 0 0\n",
			i, d.Name,
			c.reads, c.readSectors, uint64(c.readMs),
			c.writes, c.writeSectors, uint64(c.writeMs),
			c.inFlight, uint64(c.ioMs), uint64(c.weightedMs))
	}
}

// ReadsInFlight is the plant's /sys/class/block/DEV/inflight (reads).
func (p *plant) ReadsInFlight(device string) (uint64, bool) {
	for i, d := range p.sc.Devices {
		if d.Name == device {
			return p.dev[i].readsInFlight, true
		}
	}
	return 0, false
}

// probeTick is one device's tick of the plant's block-layer probe.
type probeTick struct {
	reads    latency.Ops
	oldest   time.Duration
	inFlight int
}

// sampleProbe is the plant's block-layer probe: per device, the reads
// completed since the last sample, timed from their arrival at the device
// to completion as the kernel's request stamps are, the age of the
// oldest read in flight at now and how many are in flight.
func (p *plant) sampleProbe(now time.Time, into map[string]probeTick) {
	for i, d := range p.sc.Devices {
		c := &p.dev[i]
		var oldest time.Duration
		for _, at := range c.readArrived {
			oldest = max(oldest, now.Sub(at))
		}
		into[d.Name] = probeTick{c.tickReads, oldest, len(c.readArrived)}
		c.tickReads = latency.Ops{}
	}
}
