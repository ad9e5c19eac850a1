package engine

import (
	"math"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/direction"
)

// Direction says which of a consumer's I/O directions a delay slows
// (package direction, shared with the data path, which it does not link).
type Direction = direction.Direction

// Throttle is what a decision asks of the data path for one resource:
// delay the Members' packets in Direction by Delay.
type Throttle struct {
	Name      string
	Members   []netip.Addr
	Direction Direction
	Delay     time.Duration
	// Armed are the resource's returning writers, to be held at
	// ArmedDelay from their first write (see "Returning writers").
	Armed      []netip.Addr
	ArmedDelay time.Duration
	// Own are consumers held at their own delay in Direction, instead of
	// Delay (tenant shares, reservations and caps: see "Tenants"); they
	// are not in Members. Empty without tenants.
	Own []OwnDelay
}

// OwnDelay is a consumer held at its own delay.
type OwnDelay struct {
	Addr  netip.Addr
	Delay time.Duration
}

// Throttles is what the decision asks of the data path: one Throttle per
// resource, in the order of Resources. A resource with no delay or an
// empty set gets one with no members and no delay, so the data path
// removes what it had installed for it.
func (d Decision) Throttles() []Throttle {
	ts := make([]Throttle, len(d.Resources))
	for i, r := range d.Resources {
		t := Throttle{Name: r.Name, Direction: r.Direction}
		if r.DelayMs > 0 && len(r.Members) > 0 {
			t.Members = r.Members
			t.Delay = time.Duration(math.Round(r.DelayMs * float64(time.Millisecond)))
		}
		if len(r.Own) > 0 {
			t.Members = nil
			for _, a := range r.Members {
				if _, own := ownDelay(&r, a); !own && t.Delay > 0 {
					t.Members = append(t.Members, a)
				}
			}
			for _, h := range r.Own {
				t.Own = append(t.Own, OwnDelay{Addr: h.Addr, Delay: time.Duration(math.Round(h.DelayMs * float64(time.Millisecond)))})
			}
		}
		if len(r.Returning) > 0 && r.ControlMs > 0 {
			t.Armed = r.Returning
			t.ArmedDelay = time.Duration(math.Round(r.ControlMs * float64(time.Millisecond)))
		}
		ts[i] = t
	}
	return ts
}
