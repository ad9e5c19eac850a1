package sim

import (
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// The life of a request in the plant: issued by the reader or a writer
// thread, arriving at the target (delayed as the throttle delays it),
// served by the array, completed, and answered to its initiator, which
// then issues the next.

// issueRead issues reader k's next read.
func (p *plant) issueRead(now time.Time, k int) {
	sc := p.sc
	rd := &p.readers[k]
	blocks := sc.LUNBytes / sc.ReadBytes
	off := int64(rd.dev)*sc.LUNStride + p.rng.Int63n(blocks)*sc.ReadBytes
	// A throttled consumer's reads pay one delay, on the response (see
	// evComplete): its data packets are the delayed ones.
	arrive := now.Add(msDur(sc.ReadNetMs))
	rd.out++
	p.ioSeq++
	p.push(event{at: arrive, kind: evArrive, actor: -1 - k, io: ioReq{id: p.ioSeq, op: diskmodel.Read, offset: off, length: sc.ReadBytes, issued: now, device: rd.dev}})
	rd.next = now.Add(time.Duration(float64(sc.ReadBytes) / rd.bps * float64(time.Second)))
}

// issueWrite issues writer thread t's next write, once its window lets
// it go.
func (p *plant) issueWrite(now time.Time, t int) {
	sc := p.sc
	th := &p.threads[t]
	n := min(sc.WriteBytes, th.left)
	th.left -= n
	off := th.base + th.pos
	th.pos += n
	if sc.RandomWrites {
		th.pos = p.rng.Int63n(th.limit/sc.WriteBytes) * sc.WriteBytes
	}
	if th.pos+sc.WriteBytes > th.limit {
		th.pos = 0
	}
	d := p.delayFor(th.device)
	if a := sc.Devices[th.device].Addr; p.armed[a] {
		p.joined[a] = true
	}
	th.inflight++
	send := now
	if sc.WindowBytes > 0 && sc.writeDepth() > 1 {
		send = p.window(th, now, n, d)
	}
	arrive := send.Add(msDur(sc.WriteNetMs) + time.Duration((sc.WriteDelayFactor-1)*float64(d)))
	if sc.WindowBytes > 0 && sc.writeDepth() > 1 {
		// Its data is acknowledged one delay after it arrives.
		th.unacked = append(th.unacked, ackAt{at: arrive.Add(d), bytes: n})
		th.inWindow += n
	}
	p.push(event{at: arrive, kind: evArrive, actor: t, io: ioReq{op: diskmodel.Write, offset: off, length: n, issued: now, device: th.device}})
}

// handle runs one event. Ticks are handled by the caller.
func (p *plant) handle(e event) {
	switch e.kind {
	case evBurst:
		p.startBurst(e)
	case evReadIssue:
		k := -1 - e.actor
		p.readers[k].issue = false
		if p.readers[k].turn.on(e.at.Sub(p.start)) {
			p.issueRead(e.at, k)
		}
		p.readerMore(k)
	case evArrive:
		p.arrive(e)
	case evComplete:
		p.complete(e)
	case evResponse:
		p.respond(e)
	}
}

// startBurst starts a burst of a group's threads (actor -1: every
// thread, the first burst).
func (p *plant) startBurst(e event) {
	sc := p.sc
	if p.stopped(e.at) {
		return
	}
	if p.warmRNG != nil {
		p.warm(e.at)
	}
	for i := range p.threads {
		if e.actor >= 0 && p.group(i) != e.actor {
			continue
		}
		// Each burst is a new run of the job: every thread starts at a
		// fresh random block of its region, so which threads collide
		// on a spindle changes from burst to burst instead of being
		// fixed by the seed for the whole run.
		th := &p.threads[i]
		if n := sc.Devices[th.device].Bursts; n > 0 && th.bursts >= n {
			continue
		}
		th.bursts++
		th.left = sc.BurstBytes
		th.pos = p.rng.Int63n(th.limit/sc.WriteBytes) * sc.WriteBytes
		p.running[p.group(i)]++
		p.active = true
		p.obs.activeSecond = true
		p.issueWrite(e.at, i)
		for k := 1; k < sc.writeDepth() && th.left > 0; k++ {
			p.issueWrite(e.at, i)
		}
	}
}

// arrive submits a request that reached the target to the array.
func (p *plant) arrive(e event) {
	c := &p.dev[e.io.device]
	c.account(e.at)
	c.inFlight++
	if e.io.op == diskmodel.Read {
		c.readsInFlight++
		if c.readArrived == nil {
			c.readArrived = map[uint64]time.Time{}
		}
		c.readArrived[e.io.id] = e.at
	}
	e.io.arrived = e.at
	done := p.array.Submit(e.at, e.io.op, e.io.offset, e.io.length, uint64(e.io.device))
	if e.io.op == diskmodel.Read && p.active {
		done = done.Add(msDur(p.sc.ReadContentionMs))
	}
	p.push(event{at: done, kind: evComplete, actor: e.actor, io: e.io})
}

// respond delivers a response to its initiator: the reader paces its
// next read, a writer thread issues its next write or ends its burst.
func (p *plant) respond(e event) {
	sc := p.sc
	if e.actor < 0 {
		k := -1 - e.actor
		rd := &p.readers[k]
		if sc.InitiatorWait {
			p.observeRead(k, e.at.Sub(e.io.issued), e.io.length)
		}
		rd.out--
		if rd.next.Before(e.at) {
			rd.next = e.at // no catch-up: paced from here
		}
		p.readerMore(k)
		return
	}
	th := &p.threads[e.actor]
	th.inflight--
	if p.stopped(e.at) {
		// The load generator's runtime is over: the thread stops.
		th.left = 0
	}
	if th.left > 0 {
		p.issueWrite(e.at, e.actor)
		return
	}
	if th.inflight > 0 {
		return // the burst ends with its last write
	}
	g := p.group(e.actor)
	p.running[g]--
	if p.running[g] == 0 {
		p.active = slices.ContainsFunc(p.running, func(n int) bool { return n > 0 })
		p.push(event{at: e.at.Add(sc.Pause), kind: evBurst, actor: g})
	}
}

// observeRead counts one of reader k's reads, of latency lat, in the
// second's sample.
func (p *plant) observeRead(k int, lat time.Duration, n int64) {
	ms := float64(lat) / float64(time.Millisecond)
	p.obs.readLatSum += ms
	p.obs.readCount++
	p.obs.readBytes += n
	if p.obs.perReader == nil {
		p.obs.perReader = make([]readSum, len(p.readers))
	}
	p.obs.perReader[k].sum += ms
	p.obs.perReader[k].n++
}

// complete accounts an I/O the array completed and sends its response
// on, one packet delay later for a throttled consumer.
func (p *plant) complete(e event) {
	sc := p.sc
	c := &p.dev[e.io.device]
	c.account(e.at)
	c.inFlight--
	lat := float64(e.at.Sub(e.io.arrived)) / float64(time.Millisecond)
	sectors := uint64(e.io.length / 512)
	if e.io.op == diskmodel.Read {
		c.readsInFlight--
		delete(c.readArrived, e.io.id)
		d := e.at.Sub(e.io.arrived)
		c.tickReads.Count++
		c.tickReads.Sum += d
		c.tickReads.Hist.Add(d)
		c.reads++
		c.readSectors += sectors
		c.readMs += lat
		if !sc.InitiatorWait {
			p.observeRead(-1-e.actor, d, e.io.length)
		}
	} else {
		c.writes++
		c.writeSectors += sectors
		c.writeMs += lat
		p.obs.writeBytes += e.io.length
		if p.obs.devWrite == nil {
			p.obs.devWrite = make([]int64, len(sc.Devices))
		}
		p.obs.devWrite[e.io.device] += e.io.length
		p.obs.writeLatSum += lat
		p.obs.writeCount++
	}
	resp := e.at.Add(msDur(sc.ResponseNetMs) + p.delayFor(e.io.device))
	// A response never overtakes an earlier one of its connection (a
	// no-op at depth 1: one I/O outstanding).
	var last *time.Time
	if e.actor < 0 {
		last = &p.readers[-1-e.actor].resp
	} else {
		last = &p.threads[e.actor].lastResp
	}
	if last.After(resp) {
		resp = *last
	}
	*last = resp
	p.push(event{at: resp, kind: evResponse, actor: e.actor, io: e.io})
}

// warm fills the array's write-back cache with Scenario.WarmCacheBytes of
// dirty data at now, as the writers would have left it: each thread's
// writes of WriteBytes, its depth of them at a time, the threads in
// turn, at random blocks of its region for random writers and as a
// stream from a random block for sequential ones. The data destages from
// now on as written data does.
func (p *plant) warm(now time.Time) {
	sc, rng := p.sc, p.warmRNG
	p.warmRNG = nil
	if len(p.threads) == 0 {
		return
	}
	pos := make([]int64, len(p.threads))
	for i, th := range p.threads {
		pos[i] = rng.Int63n(th.limit/sc.WriteBytes) * sc.WriteBytes
	}
	for left := sc.WarmCacheBytes; ; {
		for i, th := range p.threads {
			for range sc.writeDepth() {
				if left < sc.WriteBytes || !p.array.Prefill(now, th.base+pos[i], sc.WriteBytes) {
					return
				}
				left -= sc.WriteBytes
				pos[i] += sc.WriteBytes
				if sc.RandomWrites {
					pos[i] = rng.Int63n(th.limit/sc.WriteBytes) * sc.WriteBytes
				}
				if pos[i]+sc.WriteBytes > th.limit {
					pos[i] = 0
				}
			}
		}
	}
}
