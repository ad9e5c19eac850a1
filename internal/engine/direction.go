package engine

import (
	"fmt"
	"math"
	"net/netip"
	"time"
)

// Direction says which of a consumer's I/O directions a delay slows. It is
// the engine's own word for it, so the decision links nothing of the data
// path; the daemon translates it to the throttle backend's.
type Direction uint8

const (
	// Write slows the consumer's writes (the data path delays the packets
	// that clock them: pure ACKs, R2Ts, SCSI responses).
	Write Direction = 1 << iota
	// Read slows the consumer's reads (the data segments that carry them).
	Read
	// Both slows everything the target sends the consumer.
	Both = Write | Read
)

func (d Direction) String() string {
	switch d {
	case Write:
		return "write"
	case Read:
		return "read"
	case Both:
		return "both"
	}
	return fmt.Sprintf("direction(%d)", uint8(d))
}

// ParseDirection reads "write", "read" or "both".
func ParseDirection(s string) (Direction, error) {
	switch s {
	case "write":
		return Write, nil
	case "read":
		return Read, nil
	case "both":
		return Both, nil
	}
	return 0, fmt.Errorf("direction %q: want write, read or both", s)
}

// Throttle is what a decision asks of the data path for one resource:
// delay the Members' packets in Direction by Delay.
type Throttle struct {
	Name      string
	Members   []netip.Addr
	Direction Direction
	Delay     time.Duration
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
		ts[i] = t
	}
	return ts
}
