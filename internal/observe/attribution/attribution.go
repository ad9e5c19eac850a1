// Package attribution decides whose write (and read) rate a consumer is
// judged by. A consumer's device rates are what the disk sees, and they
// are the right measure where each client has a device of its own, as
// every iSCSI LUN does. Where clients share a device (NFS and NBD clients
// of one export, a file-backed LUN pool) the device's rate is every
// client's at once, and a reader would look like a writer: there the
// bytes each client sends to the storage ports and receives from them,
// counted on the wire in the kernel (throttle.Wire), say who writes.
//
// The package is pure: counter snapshots in, rates and choices out.
package attribution

import (
	"net/netip"
	"time"
)

// Counters are one client's byte counters on the wire, as the kernel
// keeps them: Sent, what the client sent to the storage ports (its
// writes, plus requests); Received, what the ports sent it (its reads,
// plus replies).
type Counters struct {
	Sent, Received uint64
}

// Rates are one client's wire rates over a tick, in KiB/s (1024 B/s):
// the unit of the engine's device rates (diskstats' two sectors), which
// they replace and are compared with the same thresholds as.
type Rates struct {
	WriteKBs, ReadKBs float64
}

// Meter turns counter snapshots into rates. The zero Meter is ready.
type Meter struct {
	prev map[netip.Addr]Counters
	at   time.Time
}

// Update takes the counters read at now and returns each client's rates
// since the previous Update. A client seen for the first time, or whose
// counters went back (its set entry was re-created), has no rate this
// tick; nor has anyone at the first Update or when time did not advance.
// The map is never nil: the counters run, and a client missing from it
// is one not measured yet (see Choose).
func (m *Meter) Update(now time.Time, cur map[netip.Addr]Counters) map[netip.Addr]Rates {
	out := make(map[netip.Addr]Rates, len(cur))
	if dt := now.Sub(m.at).Seconds(); m.prev != nil && dt > 0 {
		for a, c := range cur {
			p, ok := m.prev[a]
			if !ok || c.Sent < p.Sent || c.Received < p.Received {
				continue
			}
			out[a] = Rates{
				WriteKBs: float64(c.Sent-p.Sent) / dt / 1024,
				ReadKBs:  float64(c.Received-p.Received) / dt / 1024,
			}
		}
	}
	m.prev, m.at = cur, now
	return out
}

// Source says where a consumer's rate came from.
type Source string

const (
	// Device: the consumer's block device (diskstats), what the disk sees.
	Device Source = "device"
	// Wire: the client's bytes on the wire, counted in the kernel.
	Wire Source = "wire"
)

// Consumer is what the choice needs of a consumer.
type Consumer struct {
	Addr   netip.Addr
	Device string
}

// Shared returns the devices that serve more than one client address:
// those whose rates cannot tell their clients apart. One client with
// several connections (or several consumers of one address) is one
// client.
func Shared(cs []Consumer) map[string]bool {
	first := make(map[string]netip.Addr, len(cs))
	shared := map[string]bool{}
	for _, c := range cs {
		if c.Device == "" {
			continue
		}
		a, seen := first[c.Device]
		switch {
		case !seen:
			first[c.Device] = c.Addr
		case a != c.Addr:
			shared[c.Device] = true
		}
	}
	return shared
}

// Choose returns the rates a consumer is judged by: its wire rates where
// its device is shared, else its device's. A client of a shared device
// that the wire has not measured yet (just discovered, or its counters
// just re-created) writes nothing as far as the wire knows: judged by its
// device, every reader of the export would join the throttleable set
// for the seconds its write-rate average takes to decay, and be delayed.
// Without wire counters (wire nil) every consumer keeps its device's
// rates, as before wire attribution existed.
func Choose(c Consumer, shared map[string]bool, device Rates, wire map[netip.Addr]Rates) (Rates, Source) {
	if wire == nil || !shared[c.Device] {
		return device, Device
	}
	return wire[c.Addr], Wire
}
