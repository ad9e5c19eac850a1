package throttle

import "github.com/sanqos/sanqos/internal/act/plan"

// The throttle state the daemon hands a backend, and what it means on
// the wire (sets, ports, splits), live in package plan; these are the
// names of it the daemon uses.

// Group is one resource's throttle (see plan.Group).
type Group = plan.Group

// State is the complete desired throttle state.
type State = plan.State

// Stats are the data-path counters of a backend.
type Stats = plan.Stats

// Refused lists why a state cannot be applied by a backend.
type Refused = plan.Refused

// DefaultPorts are the target ports throttled when none are configured:
// iSCSI.
var DefaultPorts = plan.DefaultPorts

// MaxPorts is the most target ports one group may have.
const MaxPorts = plan.MaxPorts

// ValidatePorts checks a list of target ports as the backends will
// program them (see plan.ValidatePorts).
func ValidatePorts[P ~int | ~uint16](ports []P) error { return plan.ValidatePorts(ports) }

// DefaultSmallSegments are the small-segment splits of the ports whose
// protocol is known (see plan.DefaultSmallSegments).
var DefaultSmallSegments = plan.DefaultSmallSegments

// SmallSegmentsFor returns the split of each of ports (see
// plan.SmallSegmentsFor).
func SmallSegmentsFor(ports []uint16, set map[uint16]int, def int) map[uint16]int {
	return plan.SmallSegmentsFor(ports, set, def)
}
