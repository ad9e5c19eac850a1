package engine

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// Tenants. The resource's loop decides one delay, DelayMs, for its
// throttleable set; a tenant book (package tenant) refines it per
// consumer with four rules, all in the engine because each needs a
// consumer's own measurements, which the loop does not see. Without a
// book, or with every consumer at the default terms, none of them acts
// and a decision is the same, bit for bit, as without tenants.
//
// Read promises. A consumer with its own ThresholdMs that completed
// reads in the last readerActive makes the resource hold the strictest
// threshold among its active readers (a reader without its own carries
// the resource's); when it goes quiet the threshold relaxes to the next
// one, or the resource's. The loop moves its set point as at a reload
// (control.Loop.SetThreshold: no restart, no kick), and the decision
// names the reader that sets it (ThresholdBy).
//
// Shares. While the resource is throttled and its writers' shares
// differ, each member's delay is DelayMs × m_i. The multiplier is closed
// loop on the writers' measured rates: each tick log m_i moves by
// shareGain × tick × ln(rate_i/Σrate ÷ share_i/Σshare), a writer over its
// part of the rate getting more delay, then the logs are shifted so their
// share-weighted mean is 0 (DelayMs stays the loop's output for the
// writers as a whole) and bounded to [1/shareBound, shareBound]. A
// consumer's multiplier resets when it leaves the set.
//
// Reservations. A member with ReserveBps whose measured rate falls below
// it is given a delay of its own, less than its share delay: it starts
// there and moves each tick in the log domain by shareGain × tick ×
// ln(rate/aim), aim being reserveHeadroom above the reservation, down to
// reserveMinMs, and lets go once it climbs back to the share delay. It
// is its own loop, not a multiplier of DelayMs, so a reserved writer is
// not dragged under its reservation each time the resource's delay
// jumps (a stricter reader arriving); its share multiplier is frozen
// meanwhile.
//
// Conflicts. A reserved writer under its reservation, or held apart to
// keep it, while the read promise is missed and nothing else can be
// done about it — the signal over the threshold with the delay saturated
// at the ceiling's limit (package control, "4. The ceiling") or found
// futile ("6. Gain"), or no unreserved member writing to delay instead —
// is a conflict. It lasts, even once the promise is kept again, while
// that still holds: under tenant.PromiseWins the promise is kept because
// the reserved writer now gets the resource's delay like the others;
// under tenant.ReservationWins it keeps its reservation and the promise
// is broken. Either way the decision says so (Conflict, one sentence
// naming the writer) until conflictHold after the last tick that saw it,
// so a conflict that flickers shows as one.
//
// Caps. A consumer with CapBps is held to it whatever the latency,
// member or not: a token bucket filled at CapBps up to BurstBytes,
// emptied by its measured writes, down to capDebt seconds of the cap in
// debt; its cap delay moves each tick in the log domain by
// capGain × tick × (ln(rate/cap) + debt/(cap × capDebtTau)). The debt
// term is the integral of the rate over the cap, so the cap holds on
// average, not just at the moment; bounding the debt forgets what a
// consumer wrote over its cap long ago. The delay starts at capSeedMs
// once that sum turns positive (over the cap with its credit nearly
// spent) and is released below capFloorMs. A consumer is held at max(cap delay, its share delay).
//
// No rule holds a consumer longer than the loop's ceiling limit
// (delayLimit): a share far under the others' or a cap repaying a long
// burst is clipped there rather than outlast TCP's retransmission timer.
//
// A delay that differs from DelayMs is a consumer's own: it is listed in
// ResourceDecision.Own and Throttle.Own (and out of Throttle.Members),
// and HeldMs reports it, so the data path and the policy's demand see
// what each consumer is given.
const (
	// readerActive is how long a reader counts as active after its last
	// completed read: longer than the loop's idle hold and than the think
	// time of a paced reader (a 256 kB/s reader of 8 KiB reads one every
	// 31 ms, a slow one a few a second), so a reader between two reads
	// does not move the target; short enough that the resource relaxes
	// within seconds of a strict reader leaving.
	readerActive = 3 * time.Second
	// shareGain is the integral gain of the share and reservation
	// multipliers, per second: a ratio off by e corrects in about a
	// second, slower than the writers' rate EWMA settles (about 0.4 s at
	// the default tick and alpha), so the loop does not chase its own lag.
	shareGain = 1.0
	// shareBound bounds a share multiplier: shares 1:16 need about that
	// ratio of delays when the delay dominates a write's time.
	shareBound = 16.0
	// reserveFloor bounds the rates the loops take the log of, as a
	// fraction of their aim (a writer that stopped is not infinitely
	// short), and so how fast a reservation's delay falls.
	reserveFloor = 64.0
	// reserveMinMs is the least delay a reservation gives.
	reserveMinMs = 0.01
	// reserveHeadroom is how far above its reservation a reserved
	// writer's rate is aimed: a reservation is a promise about every
	// second, as the threshold is (see Headroom), and a loop that holds
	// the mean at the reservation leaves half the seconds under it.
	reserveHeadroom = 0.15
	// conflictHold keeps a conflict reported after the last tick it was
	// seen.
	conflictHold = 2 * time.Second
	// capGain is the cap delay's integral gain per second; capDebtTau
	// weighs the bucket's debt (seconds of the cap owed count as that
	// fraction of a log unit); capDebt bounds the debt, in seconds of the
	// cap, so a long burst is not repaid forever.
	capGain    = 2.0
	capDebtTau = 1.0
	capDebt    = 10.0
	// capSeedMs is the first cap delay; capFloorMs the delay under which
	// the cap releases.
	capSeedMs  = 1.0
	capFloorMs = 0.05
)

// Hold is a consumer held at its own delay.
type Hold struct {
	Addr    netip.Addr
	DelayMs float64
}

// tenantMemo is a consumer's tenant state between Steps.
type tenantMemo struct {
	lastRead time.Time // its last Step with completed reads
	// shareLog: the log of its share multiplier; reserveMs its
	// reservation's delay (0: not binding); capMs its cap delay,
	// capTokens its bucket (bytes).
	shareLog, reserveMs float64
	capMs, capTokens    float64
	capStarted          bool
	// kbs is the write rate judged this Step, over elapsed seconds (0:
	// not measured).
	kbs, elapsed float64
}

// resTenants is a resource's tenant state between Steps.
type resTenants struct {
	conflictUntil time.Time
	conflict      string
}

// SetTenants replaces the tenant book (at reload). It takes effect at
// the next Step; what the loops hold is kept, so no delay in force is
// dropped by a changed book.
func (e *Engine) SetTenants(b *tenant.Book) { e.cfg.Tenants = b }

// readThreshold sets r's threshold for this Step from its active
// readers' own promises (see "Read promises") and returns who sets it.
func (e *Engine) readThreshold(r *resource, cons []ConsumerRates, now time.Time) string {
	th, by := math.Inf(1), ""
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		if c.dev >= 0 && e.devs[c.dev].valid && e.devs[c.dev].rates.Reads > 0 && e.pol.Counts(c.c) {
			c.ten.lastRead = now
		}
		if c.ten.lastRead.IsZero() || now.Sub(c.ten.lastRead) > readerActive {
			continue
		}
		t, name := cons[ci].Terms.ThresholdMs, cons[ci].Name
		if t <= 0 {
			t, name = r.threshold, ""
		}
		if t < th {
			th, by = t, name
		}
	}
	if math.IsInf(th, 1) {
		th, by = r.threshold, ""
	}
	r.loop.SetThreshold(th)
	return by
}

// tenantDelays applies shares, reservations and caps to r's consumers
// for this Step (see "Tenants") and lists the consumers held at their
// own delay in rd.Own; noteHeld then records them.
func (e *Engine) tenantDelays(r *resource, rd *ResourceDecision, cons []ConsumerRates, now time.Time) {
	if e.cfg.Direction&direction.Write == 0 || e.cfg.Tenants.Len() == 0 {
		return
	}
	dt := e.cfg.Tick.Seconds()
	member := func(ci int) bool { return cons[ci].Throttleable && containsAddr(rd.Members, e.cons[ci].c.Addr) }
	if len(rd.Members) == 0 {
		for _, ci := range r.consumers {
			e.cons[ci].ten.shareLog, e.cons[ci].ten.reserveMs = 0, 0
		}
	}
	e.shares(r, rd, cons, member, dt)
	e.reservations(r, rd, cons, member, dt, now)
	lim := delayLimit(rd)
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		cap := e.capDelay(c, &cons[ci], dt, lim)
		d := 0.0
		if member(ci) && rd.DelayMs > 0 {
			d = rd.DelayMs * math.Exp(c.ten.shareLog)
			if c.ten.reserveMs > 0 {
				d = min(d, c.ten.reserveMs)
			}
		} else if containsAddr(rd.Returning, c.c.Addr) {
			d = rd.ControlMs
		}
		d = min(max(d, cap), lim)
		isMember := member(ci) && rd.DelayMs > 0
		if (isMember && d != rd.DelayMs) || (!isMember && cap > 0) {
			rd.Own = append(rd.Own, Hold{Addr: c.c.Addr, DelayMs: d})
		}
	}
}

// delayLimit is the most any consumer of the resource may be held: the
// loop's ceiling limit (package control, "4. The ceiling"), under TCP's
// minimum retransmission timeout, so no tenant rule — a large share, a
// cap repaying its debt — holds a packet long enough for its sender to
// time out.
func delayLimit(rd *ResourceDecision) float64 {
	if rd.UMaxLimitMs > 0 {
		return rd.UMaxLimitMs
	}
	_, hi := control.DelayBoundsMs()
	return hi
}

// shares moves the share multipliers of r's writing members (see
// "Shares").
func (e *Engine) shares(r *resource, rd *ResourceDecision, cons []ConsumerRates, member func(int) bool, dt float64) {
	var sumRate, sumShare float64
	differ, first := false, 0.0
	for _, ci := range r.consumers {
		if !member(ci) {
			e.cons[ci].ten.shareLog = 0
			continue
		}
		s := cons[ci].Terms.EffectiveShare()
		if first == 0 {
			first = s
		}
		differ = differ || s != first
		if e.cons[ci].ten.reserveMs > 0 || !(cons[ci].WriteEWMAKBs > 0) {
			continue
		}
		sumRate += cons[ci].WriteEWMAKBs
		sumShare += s
	}
	if !differ || rd.DelayMs <= 0 || !(sumRate > 0) {
		if !differ {
			for _, ci := range r.consumers {
				e.cons[ci].ten.shareLog = 0
			}
		}
		return
	}
	var mean float64
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		if !member(ci) || c.ten.reserveMs > 0 || !(cons[ci].WriteEWMAKBs > 0) {
			continue
		}
		s := cons[ci].Terms.EffectiveShare()
		c.ten.shareLog += shareGain * dt * math.Log((cons[ci].WriteEWMAKBs/sumRate)/(s/sumShare))
		mean += s / sumShare * c.ten.shareLog
	}
	b := math.Log(shareBound)
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		if !member(ci) || c.ten.reserveMs > 0 || !(cons[ci].WriteEWMAKBs > 0) {
			continue
		}
		c.ten.shareLog = min(max(c.ten.shareLog-mean, -b), b)
	}
}

// reservations moves the reservation multipliers of r's members and
// judges the conflict (see "Reservations").
func (e *Engine) reservations(r *resource, rd *ResourceDecision, cons []ConsumerRates, member func(int) bool, dt float64, now time.Time) {
	reserved, unreservedWriting := false, false
	who := ""
	for _, ci := range r.consumers {
		if !member(ci) {
			e.cons[ci].ten.reserveMs = 0
			continue
		}
		res := cons[ci].Terms.ReserveBps
		if res <= 0 {
			unreservedWriting = unreservedWriting || cons[ci].WriteKBs > 0
			continue
		}
		// Held below its share delay for its reservation, or under it.
		if e.cons[ci].ten.reserveMs > 0 || cons[ci].WriteEWMAKBs*1024 < res {
			reserved = true
			if who == "" {
				who = fmt.Sprintf("%s (reserved %.1f MB/s, writing %.1f MB/s)", cons[ci].Name, res/1e6, cons[ci].WriteEWMAKBs*1024/1e6)
			}
		}
	}
	// Once in conflict, it lasts while nothing else can be delayed
	// instead, even with the promise kept: under PromiseWins the promise
	// is kept because the reservation is not.
	was := now.Before(r.ten.conflictUntil)
	missed := len(rd.Members) > 0 && (rd.SignalMs > rd.ThresholdMs || was) && (rd.Saturated || rd.Futile || !unreservedWriting)
	if reserved && missed {
		r.ten.conflictUntil = now.Add(conflictHold)
		r.ten.conflict = fmt.Sprintf("writer %s cannot have its reservation while the read promise of %g ms holds: the %s wins",
			who, rd.ThresholdMs, e.cfg.Tenants.Precedence())
	}
	inConflict := now.Before(r.ten.conflictUntil)
	if inConflict {
		rd.Conflict = r.ten.conflict
	}
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		res := cons[ci].Terms.ReserveBps
		if !member(ci) || res <= 0 || rd.DelayMs <= 0 ||
			inConflict && e.cfg.Tenants.Precedence() == tenant.PromiseWins {
			c.ten.reserveMs = 0
			continue
		}
		shareMs := rd.DelayMs * math.Exp(c.ten.shareLog)
		aim := res * (1 + reserveHeadroom)
		rate := max(cons[ci].WriteEWMAKBs*1024, aim/reserveFloor)
		switch {
		case c.ten.reserveMs > 0:
			c.ten.reserveMs = max(c.ten.reserveMs*math.Exp(shareGain*dt*math.Log(rate/aim)), reserveMinMs)
			if c.ten.reserveMs >= shareMs {
				c.ten.reserveMs = 0
			}
		case rate < aim:
			c.ten.reserveMs = max(shareMs*math.Exp(shareGain*dt*math.Log(rate/aim)), reserveMinMs)
		}
	}
}

// capDelay moves consumer c's cap delay (see "Caps") and returns it.
func (e *Engine) capDelay(c *consumer, cr *ConsumerRates, dt, lim float64) float64 {
	t := &c.ten
	limit := cr.Terms.CapBps
	if limit <= 0 {
		t.capMs, t.capTokens, t.capStarted = 0, 0, false
		return 0
	}
	if !t.capStarted {
		t.capTokens, t.capStarted = cr.Terms.BurstBytes, true
	}
	// The bucket counts real time, as the rates do; the loop's gain the
	// nominal tick.
	if t.elapsed > 0 {
		t.capTokens = min(t.capTokens+(limit-t.kbs*1024)*t.elapsed, cr.Terms.BurstBytes)
	}
	t.capTokens = max(t.capTokens, -limit*capDebt)
	rate := max(cr.WriteEWMAKBs*1024, limit/reserveFloor)
	err := math.Log(rate/limit) - t.capTokens/(limit*capDebtTau)
	switch {
	case t.capMs == 0 && err > 0:
		t.capMs = capSeedMs
	case t.capMs > 0:
		t.capMs *= math.Exp(capGain * dt * err)
		t.capMs = min(t.capMs, lim)
		if t.capMs < capFloorMs {
			t.capMs = 0
		}
	}
	cr.CapMs, cr.Capped = t.capMs, t.capMs > 0
	return t.capMs
}

// ownDelay is the delay rd gives consumer a when it is held at its own.
func ownDelay(rd *ResourceDecision, a netip.Addr) (float64, bool) {
	for _, h := range rd.Own {
		if h.Addr == a {
			return h.DelayMs, true
		}
	}
	return 0, false
}
