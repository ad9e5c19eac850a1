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
//     here membership is re-evaluated every tick. A writer is also
//     judged by its demand, not only by its rate (see "Demand" below).
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

	"github.com/sanqos/sanqos/internal/decide/smoothing"
	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/topology"
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

// Demand. The rate of a writer held by the throttle is what the delay
// leaves it, not what it wants: twelve threads of 4 KiB random writes held
// at 200 ms complete some 60 writes a second, 240 kB/s, under the leave
// threshold. Judged by that rate the writer leaves, runs unheld, writes
// hard again, rejoins a tick or two later, and so on: the lab saw each
// writer leave and rejoin about 97 times in 80 s with the reader at 4.3 ×
// its threshold (issue 33). So a held consumer is also judged by what
// the delay does not shrink: how many of its writes are outstanding. By
// Little's law a writer's writes in flight (on the wire, held by the
// throttle or at the device) are its writes per second times the time
// each takes; the engine estimates that time as the device's write await
// plus the delay in force on its flows (Sample.Outstanding). A
// closed-loop writer, which is what a thread writing as fast as it can
// is, keeps the same number of writes outstanding whatever the delay,
// while its rate falls with it: four threads of one write each keep
// about three to four outstanding at any delay. A writer that stops has
// none. A held member therefore stays while its outstanding writes
// (EWMA) are at least LeaveOutstanding, even below LeaveKBs, and a
// consumer joins with JoinOutstanding or more, even below JoinKBs: at one
// write always in flight it writes continuously, and only the delay or
// the array keeps its rate low. Held or not: an array that holds writes
// back by itself (a full write-back cache destaging at the random-write
// rate) leaves a closed-loop writer the array's rate, under JoinKBs, with
// its writes outstanding as before; judged by that rate it would never
// be held, the delay would stay 0, and the reader would wait behind the
// cache (docs/results.md, the scenario matrix).
// Why this evidence: it needs only what every backend has, the delay the
// engine decided and /proc/diskstats, not the data path's counters, which
// the nfqueue backend keeps per consumer but netem, htb and edt do not in
// the same form; and it does not shrink as the delay grows, which the
// wire's bytes and the device's writes in flight both do. What it costs:
// an open-loop writer (a log writing a few times a second) has λ·(await +
// delay) outstanding, which the delay inflates: at 200 ms a log of 3
// writes a second counts 0.6 and stays a member while it is held that
// hard. Its writes are few, and the delay it keeps falls once the reader
// is served, and with it the estimate, so it leaves then. Not held, the
// estimate is λ·await, which nothing inflates but the array's own wait:
// a light writer counts one only if each of its writes waits a second
// over its rate's interval. A consumer not held leaves by its rate
// alone, as in the thesis.
const (
	JoinOutstanding  = 1.0
	LeaveOutstanding = 0.5
)

// Sample is one consumer's tick as the policy judges it.
type Sample struct {
	// WriteKBs is its write rate (kB/s).
	WriteKBs float64
	// HeldMs is the delay in force on its writes during the tick (0: not
	// held, its rate is its own).
	HeldMs float64
	// Outstanding estimates its writes in flight over the tick: writes per
	// second × (device write await + HeldMs) (see "Demand").
	Outstanding float64
}

// Policy decides, per consumer and tick, whether its reads count in its
// resource's signal and whether it is throttleable.
type Policy interface {
	Name() string
	// Counts reports whether c's reads make up its resource's signal.
	Counts(c topology.Consumer) bool
	// Judge folds c's tick into st and returns whether c is in the
	// throttleable set now.
	Judge(st *State, c topology.Consumer, s Sample) bool
}

// State is one consumer's memory across ticks. The zero value is a new
// consumer at rest (EWMAs 0, not a member).
type State struct {
	WriteEWMAKBs float64
	// OutstandingEWMA follows Sample.Outstanding with the same weight.
	OutstandingEWMA float64
	Member          bool
}

// fold adds s to st's EWMAs; a nonsense value counts as 0.
func (st *State) fold(alpha float64, s Sample) {
	kbs, out := s.WriteKBs, s.Outstanding
	if math.IsNaN(kbs) || kbs < 0 {
		kbs = 0
	}
	if math.IsNaN(out) || out < 0 || math.IsInf(out, 0) {
		out = 0
	}
	st.WriteEWMAKBs += alpha * (kbs - st.WriteEWMAKBs)
	st.OutstandingEWMA += alpha * (out - st.OutstandingEWMA)
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

// Update is Judge for a consumer that is not held: its rate alone.
func (h *Hysteresis) Update(st *State, c topology.Consumer, writeKBs float64) bool {
	return h.Judge(st, c, Sample{WriteKBs: writeKBs})
}

// Judge applies e ← e + α·(x − e) to the rate and the outstanding writes,
// then joins above JoinKBs and leaves below LeaveKBs; in between,
// membership is unchanged. It also joins with JoinOutstanding writes
// outstanding, and while it is held (s.HeldMs > 0) does not leave with
// LeaveOutstanding or more (see "Demand").
func (h *Hysteresis) Judge(st *State, _ topology.Consumer, s Sample) bool {
	st.fold(h.alpha, s)
	held := s.HeldMs > 0
	switch {
	case st.WriteEWMAKBs > h.joinKBs:
		st.Member = true
	case st.OutstandingEWMA >= JoinOutstanding:
		st.Member = true
	case held && st.Member && st.OutstandingEWMA >= LeaveOutstanding:
		// Held and still writing: its rate is the delay's, not its own.
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

// Update is Judge with the rate alone.
func (m *Manual) Update(st *State, c topology.Consumer, writeKBs float64) bool {
	return m.Judge(st, c, Sample{WriteKBs: writeKBs})
}

// Judge keeps the EWMAs for monitoring; membership is the list.
func (m *Manual) Judge(st *State, c topology.Consumer, s Sample) bool {
	st.fold(m.alpha, s)
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
