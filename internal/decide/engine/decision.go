package engine

import (
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/tenant"
)

// Decision is the outcome of one Step.
type Decision struct {
	At        time.Time
	Resources []ResourceDecision
	Consumers []ConsumerRates
	// MissingDevices counts topology devices absent from the snapshot
	// (skipped this tick).
	MissingDevices int
}

// ResourceDecision is one resource's signal and throttle for a tick.
type ResourceDecision struct {
	Name string
	// SignalMs is the filtered read latency the controller saw; RawMs the
	// tick's unfiltered Σ read ms / Σ reads (0 when Reads is 0).
	SignalMs, RawMs float64
	ThresholdMs     float64
	// ThresholdBy names the active reader whose own read promise is the
	// threshold this tick ("" for the resource's; see "Tenants" in
	// tenants.go).
	ThresholdBy string
	// Conflict, when not empty, says in one sentence which reserved
	// writer's reservation the read promise cannot afford and which of
	// the two wins (see "Reservations" in tenants.go).
	Conflict string
	// Own are the consumers held at their own delay instead of DelayMs:
	// members whose share or reservation scales it, and consumers held
	// to their cap (see "Tenants" in tenants.go). Empty without tenants.
	Own []Hold
	// TargetMs is the controller's set point, ThresholdMs·(1−Headroom).
	TargetMs float64
	// ControlMs is the controller's output. It is kept while the set is
	// empty: writers that pause and come back meet the delay they left
	// instead of a ramp from 0 that lets their first second through.
	ControlMs float64
	// DelayMs is the delay applied to the members: ControlMs while the
	// set has members, else 0 (nobody is held).
	DelayMs float64
	// UMaxMs is the largest delay the controller may set now (the
	// ceiling, which follows the writers; see "4. The ceiling" in package control), UMaxLimitMs
	// the highest it may go.
	UMaxMs, UMaxLimitMs float64
	// Saturated: the delay has sat at the ceiling's limit with the read
	// latency over the threshold for a second or more; packet delay alone
	// is not holding these writers.
	Saturated bool
	// Futile: the loop measured that delaying the writers buys the reads
	// nothing and holds the delay released; Probing: it is measuring that
	// this tick; GainMsPerMs the last measured gain, ms of read latency
	// per ms of delay (see "8. Gain" in package control).
	Futile, Probing bool
	GainMsPerMs     float64
	// RelapseMs: while the relapse guard holds, the delay that let the
	// last overload in (see "Relapse" in package control); 0 otherwise.
	RelapseMs float64
	// RecallMs: the delay a climb from rest would start at, what the
	// last burst needed (see "Recall" in package control); 0 when none.
	RecallMs float64
	// Held: no read completed and none has been in flight for a tick, so
	// the signal and the delay were kept as they were (see "1. Signal" in package control).
	Held bool
	// Armed: the set was empty, or none of its members wrote this tick,
	// so the controller was not stepped and keeps the delay for writers
	// that come back (see "2. Armed through pauses" in package control).
	Armed bool
	// PendingMs is the age of the oldest read known to be in flight for
	// more than a tick (0: none), a lower bound of its latency.
	PendingMs float64
	Reads     uint64
	// Signal is the statistic the controller follows (SignalMean, …);
	// Source where this tick's reads came from: SourceEBPF when every
	// measured device was probed, else SourceDiskstats (a percentile
	// signal then falls back to the mean).
	Signal, Source string
	// MeanMs, P95Ms and P99Ms describe the tick's completed reads when
	// they came from the probe (0 otherwise), beside RawMs, the signal's
	// raw value.
	MeanMs, P95Ms, P99Ms float64
	// Members is the throttleable set (whether or not DelayMs is 0).
	Members []netip.Addr
	// Returning are consumers out of the set that were in it within
	// control.ArmHold: the data path holds them at ControlMs from their first
	// write (see "Returning writers").
	Returning []netip.Addr
	Direction Direction
	// MissingDevices counts this resource's devices absent from the
	// snapshot.
	MissingDevices int
}

// ConsumerRates is one consumer's measured rates for a tick. Consumers
// sharing a device each see the whole device's rates.
type ConsumerRates struct {
	Resource, Device                          string
	Addr                                      netip.Addr
	ReadKBs, WriteKBs, WriteEWMAKBs, RAwaitMs float64
	Throttleable                              bool
	// WriteFrom says which write rate the policy judged (and
	// WriteEWMAKBs follows): "wire" or "device"; "" without wire
	// counters, where it is always the device's. See wire.go.
	WriteFrom string
	// OutstandingWrites is the EWMA of its writes in flight the policy
	// judges a held writer by; HeldMs the delay this decision puts on
	// its writes (see "Demand" in demand.go). The data path may hold it
	// at another (the daemon reports that beside it).
	OutstandingWrites, HeldMs float64
	// Name is how status and metrics call the consumer (tenant.Label);
	// Terms what its tenant entry gives it.
	Name  string
	Terms tenant.Terms
	// CapMs is the delay its cap puts on its writes (0: not capped,
	// Capped false); HeldMs is at least that.
	CapMs  float64
	Capped bool
}
