package sim

import "time"

// A writer thread and the reader are each one connection to the target,
// with its own queue of outstanding I/Os (Scenario.WriteIODepth,
// ReadIODepth); this file holds what ties those I/Os together.

// ackAt is data of a connection's window acknowledged at at.
type ackAt struct {
	at    time.Time
	bytes int64
}

// Deep queues. A packet delay is a delay line per flow: it adds latency
// to every packet, not occupancy, so the I/Os a connection keeps
// outstanding each pay it at the same time. A write at depth N pays what
// a synchronous one does — (WriteDelayFactor − 1) delays before the
// target has its data (the delayed R2T and ACKs that clock it in) and
// one on its response — and N of them overlap: a connection's rate
// falls with the delay as N / (service + factor × delay), so holding a
// deep writer takes N times the delay of a sync one. Two things tie the
// outstanding I/Os of one connection together. The delayed packets of a
// flow leave in order: a response never overtakes an earlier one of its
// connection (when the delay falls, later responses wait behind earlier
// ones). And with Scenario.WindowBytes the connection's data shares one
// TCP window that each delayed ACK reopens, one delay after the data
// reached the target: at most WindowBytes per delay, whatever N is. At
// depth 1 neither binds (one write's data in flight, the factor
// calibrated on sync writers), so a sync scenario runs exactly as
// before.

// writeDepth and readDepth are the scenario's queue depths, 1 at least.
func (sc Scenario) writeDepth() int { return max(sc.WriteIODepth, 1) }
func (sc Scenario) readDepth() int  { return max(sc.ReadIODepth, 1) }

// readerMore schedules reader k's next issue, at its pacing time (or the
// start of its next turn), when it has room for another read outstanding
// and none is scheduled.
func (p *plant) readerMore(k int) {
	rd := &p.readers[k]
	if rd.out >= p.sc.readDepth() || rd.issue {
		return
	}
	rd.issue = true
	at := p.start.Add(rd.turn.next(rd.next.Sub(p.start)))
	p.push(event{at: at, kind: evReadIssue, actor: -1 - k})
}

// reader is one reading consumer: the device it reads, its rate and its
// turns, and its connection's state.
type reader struct {
	dev  int
	bps  float64
	turn Turn
	// next is the earliest issue time of its next read; out its reads
	// outstanding; issue says an evReadIssue is scheduled; resp its
	// latest response.
	next  time.Time
	out   int
	issue bool
	resp  time.Time
}

// readSum is one reader's reads of a second.
type readSum struct {
	sum float64
	n   int
}

// Turn is when a reader reads: from At on, for On out of every Every
// (Every 0: always, from At).
type Turn struct {
	At, On, Every time.Duration
}

// on says whether the reader reads at t (since the start).
func (u Turn) on(t time.Duration) bool {
	if t < u.At {
		return false
	}
	return u.Every <= 0 || (t-u.At)%u.Every < u.On
}

// next is the first time at or after t the reader reads.
func (u Turn) next(t time.Duration) time.Duration {
	switch {
	case u.on(t):
		return t
	case t < u.At:
		return u.At
	}
	return u.At + ((t-u.At)/u.Every+1)*u.Every
}

// window is when a write of n bytes issued at now may go out on its
// connection: once the acknowledgements that have come back leave room
// for it in the window (a write larger than the window goes alone).
func (p *plant) window(th *thread, now time.Time, n int64, d time.Duration) time.Time {
	send := now
	i := 0
	for ; i < len(th.unacked); i++ {
		a := th.unacked[i]
		if a.at.After(send) && th.inWindow+n <= p.sc.WindowBytes {
			break
		}
		if a.at.After(send) {
			send = a.at
		}
		th.inWindow -= a.bytes
	}
	th.unacked = append(th.unacked[:0], th.unacked[i:]...)
	return send
}
