package throttle

import "github.com/sanqos/sanqos/internal/act/packetpath"

// The nfqueue backend's user-space packet path lives in package
// packetpath; these are the names of it the daemon and the other
// backends use (the edt backend applies the same rise limit in the
// kernel).

// RiseLimit bounds how fast a flow's delay rises (see packetpath).
type RiseLimit = packetpath.RiseLimit

// DefaultRiseLimit is the rise limit of the nfqueue and edt backends
// unless one is configured.
var DefaultRiseLimit = packetpath.DefaultRiseLimit

// RiseStats say how much the rise limit held delays below the requested
// ones.
type RiseStats = packetpath.RiseStats

// ConsumerStats are one consumer's data-path counters.
type ConsumerStats = packetpath.ConsumerStats
