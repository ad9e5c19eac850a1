package engine

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
)

// Returning writers. A writer is found by its writes, so one that comes
// back after a pause is seen a tick after its first writes have reached
// the disk: at a busy disk that first tick of small random writes is what
// the reader then waits behind for a second or two, although the delay
// was armed. The data path can see a write at once (throttle "Arming"),
// so each decision names the resource's returning writers: consumers that
// were in its set within control.ArmHold and are not now, to be held at
// the delay the set left (ControlMs) from their first write data segment.
// Only writers that paused are named: one that has written within
// control.ActiveWindow left the set because its rate fell, not because it
// stopped, and is judged by the policy alone (a VM back to light writes
// after a bulk load must not be held at the bulk load's delay). A named
// writer that writes stays named while it rejoins, for up to
// control.ActiveWindow from its first write: the policy needs a tick or
// two of writes to take it back, and dropping it at its first write would
// let it run unheld in between. One that has not joined by then writes
// too little to be a member, and is named no more (the kernel's entry
// lapses too). Nobody is delayed for being named: a returning writer that
// does not write is never held. Only the read-over-write policy, whose
// members are found writing, and only in the write direction.

// noteMember records that c is in its resource's set at now.
func noteMember(c *consumer, member bool, now time.Time) {
	if member {
		c.memberAt = now
		c.returning, c.rejoinSince = false, time.Time{}
	}
}

// returning lists r's returning writers into rd.
func (e *Engine) returning(r *resource, rd *ResourceDecision, now time.Time) {
	if e.cfg.Policy != policy.ReadOverWrite || e.cfg.Direction&direction.Write == 0 || rd.ControlMs <= 0 {
		return
	}
	for _, ci := range r.consumers {
		c := &e.cons[ci]
		if !e.stillReturning(c, now) {
			continue
		}
		if !containsAddr(rd.Members, c.c.Addr) && !containsAddr(rd.Returning, c.c.Addr) {
			rd.Returning = append(rd.Returning, c.c.Addr)
		}
	}
}

// stillReturning moves c's returning state to now and reports it.
func (e *Engine) stillReturning(c *consumer, now time.Time) bool {
	if c.memberAt.IsZero() || c.memberAt.Equal(now) || now.Sub(c.memberAt) >= control.ArmHold {
		c.returning, c.rejoinSince = false, time.Time{}
		return false
	}
	switch paused := c.lastWrite.IsZero() || now.Sub(c.lastWrite) >= control.ActiveWindow; {
	case paused:
		c.returning, c.rejoinSince = true, time.Time{}
	case !c.returning:
	case c.rejoinSince.IsZero():
		c.rejoinSince = now
	case now.Sub(c.rejoinSince) >= control.ActiveWindow:
		c.returning, c.rejoinSince = false, time.Time{}
	}
	return c.returning
}

func containsAddr(s []netip.Addr, a netip.Addr) bool {
	for _, x := range s {
		if x == a {
			return true
		}
	}
	return false
}

// noteWrite records that consumer c was judged writing kbs this tick.
func noteWrite(c *consumer, kbs float64, now time.Time) {
	if kbs > 0 {
		c.lastWrite = now
	}
}
