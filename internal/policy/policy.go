// Package policy decides who is throttled and whose latency counts: for
// each resource, which consumers are in its throttleable set and which
// consumers' reads make up its signal. It is pure code: rates in,
// membership out, converged every tick.
//
// Two policies exist:
//   - read-over-write (thesis §4.5, Listing C.2): reads are protected from
//     writes. Every consumer's reads count; a consumer whose write-rate EWMA
//     exceeds JoinKBs joins the set and leaves when it falls below
//     LeaveKBs. The gap between the two (hysteresis) keeps a writer hovering
//     around one threshold from flapping in and out every tick. The thesis
//     converged its sets once a second and saw overshoot from that lag;
//     here membership is re-evaluated every tick.
//   - manual (thesis §5.7, prototype 1): fixed lists; the named protected
//     consumers' read latency is the signal and the named consumers to
//     throttle are always in the set.
package policy

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"

	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/smoothing"
	"github.com/sanqos/sanqos/internal/topology"
)

// Names of the policies.
const (
	ReadOverWrite = "read-over-write"
	ManualName    = "manual"
)

// DefaultJoinKBs is the write rate (kB/s, EWMA) at which a consumer joins
// its resource's throttleable set: the thesis's write_thresh of 1000
// sectors/s (Listing C.2) — far above the writes of an interactive reader
// or a log, far below a streaming writer.
const DefaultJoinKBs = 500

// Policy decides, per consumer and tick, whether its reads count in its
// resource's signal and whether it is throttleable.
type Policy interface {
	Name() string
	// Counts reports whether c's reads make up its resource's signal.
	Counts(c topology.Consumer) bool
	// Update folds c's write rate of this tick into st and returns whether
	// c is in the throttleable set now.
	Update(st *State, c topology.Consumer, writeKBs float64) bool
}

// State is one consumer's memory across ticks. The zero value is a new
// consumer at rest (EWMA 0, not a member).
type State struct {
	WriteEWMAKBs float64
	Member       bool
}

// Hysteresis is the read-over-write policy.
type Hysteresis struct {
	alpha            float64
	joinKBs, leaveKB float64
}

// NewReadOverWrite returns the read-over-write policy: write-rate EWMA with
// weight alpha, join above joinKBs, leave below leaveKBs. leaveKBs 0 means
// joinKBs/2.
func NewReadOverWrite(alpha, joinKBs, leaveKBs float64) (*Hysteresis, error) {
	if err := smoothing.CheckAlpha(alpha); err != nil {
		return nil, fmt.Errorf("write-rate EWMA: %w", err)
	}
	if !(joinKBs > 0) || math.IsInf(joinKBs, 0) {
		return nil, fielderr.New("policy.ReadOverWrite.JoinKBs", "join threshold", fmt.Sprintf("%v kB/s", joinKBs), fmt.Sprintf("must be a positive write rate, e.g. %d kB/s", DefaultJoinKBs))
	}
	if leaveKBs == 0 {
		leaveKBs = joinKBs / 2
	}
	if !(leaveKBs > 0 && leaveKBs <= joinKBs) {
		return nil, fielderr.New("policy.ReadOverWrite.LeaveKBs", "leave threshold", fmt.Sprintf("%v kB/s", leaveKBs), fmt.Sprintf("must be above 0 and at most the join threshold (%v kB/s)", joinKBs))
	}
	return &Hysteresis{alpha: alpha, joinKBs: joinKBs, leaveKB: leaveKBs}, nil
}

func (h *Hysteresis) Name() string                  { return ReadOverWrite }
func (h *Hysteresis) Counts(topology.Consumer) bool { return true }

// Update applies e ← e + α·(rate − e), then joins above JoinKBs and leaves
// below LeaveKBs; in between, membership is unchanged.
func (h *Hysteresis) Update(st *State, _ topology.Consumer, writeKBs float64) bool {
	if math.IsNaN(writeKBs) || writeKBs < 0 {
		writeKBs = 0
	}
	st.WriteEWMAKBs += h.alpha * (writeKBs - st.WriteEWMAKBs)
	switch {
	case st.WriteEWMAKBs > h.joinKBs:
		st.Member = true
	case st.WriteEWMAKBs < h.leaveKB:
		st.Member = false
	}
	return st.Member
}

// ManualConfig names the consumers of the manual policy. A name matches a
// consumer's IP address, IQN or device name.
type ManualConfig struct {
	Protected []string // whose read latency is the signal
	Throttle  []string // who is always in the throttleable set
}

// Manual is the manual policy.
type Manual struct {
	alpha     float64
	protected map[string]bool
	throttle  map[string]bool
}

// NewManual returns the manual policy; alpha weighs the write-rate EWMA,
// which is kept for monitoring only.
func NewManual(alpha float64, cfg ManualConfig) (*Manual, error) {
	if err := smoothing.CheckAlpha(alpha); err != nil {
		return nil, fmt.Errorf("write-rate EWMA: %w", err)
	}
	var errs []error
	if len(cfg.Protected) == 0 {
		errs = append(errs, fielderr.New("policy.ManualConfig.Protected", "manual policy's protected", "[]", "must name at least one protected consumer (IP, IQN or device) whose reads are the signal"))
	}
	if len(cfg.Throttle) == 0 {
		errs = append(errs, fielderr.New("policy.ManualConfig.Throttle", "manual policy's throttle", "[]", "must name at least one consumer (IP, IQN or device) to throttle"))
	}
	m := &Manual{alpha: alpha, protected: set(cfg.Protected), throttle: set(cfg.Throttle)}
	var both []string
	for n := range m.protected {
		if m.throttle[n] {
			both = append(both, n)
		}
	}
	if len(both) > 0 {
		sort.Strings(both)
		errs = append(errs, fielderr.New("policy.ManualConfig.Throttle", "manual policy's throttle", both, strings.Join(both, ", ")+" both protected and throttled; name each consumer in one list only"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		n = strings.TrimSpace(n)
		if a, err := netip.ParseAddr(n); err == nil {
			n = a.Unmap().String() // one spelling per address
		}
		m[n] = true
	}
	return m
}

func match(names map[string]bool, c topology.Consumer) bool {
	if (c.Addr.IsValid() && names[c.Addr.Unmap().String()]) || (c.Device != "" && names[c.Device]) {
		return true
	}
	for _, q := range c.IQNs {
		if names[q] {
			return true
		}
	}
	return false
}

func (m *Manual) Name() string                    { return ManualName }
func (m *Manual) Counts(c topology.Consumer) bool { return match(m.protected, c) }

// Update keeps the write-rate EWMA for monitoring; membership is the list.
func (m *Manual) Update(st *State, c topology.Consumer, writeKBs float64) bool {
	if math.IsNaN(writeKBs) || writeKBs < 0 {
		writeKBs = 0
	}
	st.WriteEWMAKBs += m.alpha * (writeKBs - st.WriteEWMAKBs)
	st.Member = match(m.throttle, c)
	return st.Member
}

// Unmatched lists the configured names that match no consumer of topo, so
// that a typo is reported instead of silently protecting no one.
func (m *Manual) Unmatched(topo topology.Topology) []string {
	var out []string
	for _, names := range []map[string]bool{m.protected, m.throttle} {
		for n := range names {
			found := false
			for _, r := range topo.Resources {
				for _, c := range r.Consumers {
					if match(map[string]bool{n: true}, c) {
						found = true
					}
				}
			}
			if !found {
				out = append(out, n)
			}
		}
	}
	sort.Strings(out)
	return out
}
