package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/policy"
	"github.com/sanqos/sanqos/internal/decide/smoothing"
	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// The bounds of the engine's periods and latencies. A tick under 10 ms
// sees too few reads complete to measure (and diskstats counts whole
// milliseconds); over 10 s the loop answers a writer's burst after it is
// over. A threshold under 100 µs is under what a read takes on any
// device; over 10 s it is past the initiators' own timeouts.
const (
	minTick, maxTick           = 10 * time.Millisecond, 10 * time.Second
	minThreshold, maxThreshold = 100 * time.Microsecond, 10 * time.Second
)

// Validate reports every field of cfg that New would refuse, saying what
// it accepts, so that a caller can check a configuration without
// building an engine. Each field's error is a *fielderr.Error (the
// controller's and the policy's too), which the daemon maps to the
// configuration key that set the field.
func (cfg Config) Validate() error {
	var errs []error
	bad := func(field, name string, v any, want string) {
		errs = append(errs, fielderr.New("engine.Config."+field, name, v, want))
	}
	if cfg.Tick < minTick || cfg.Tick > maxTick {
		bad("Tick", "tick", cfg.Tick, fmt.Sprintf("must be between %v and %v", minTick, maxTick))
	}
	if err := smoothing.CheckAlpha(cfg.Alpha); err != nil {
		bad("Alpha", "read-latency EWMA alpha", cfg.Alpha, "must be > 0 and <= 1 (the weight of the newest sample)")
	}
	if err := smoothing.CheckAlpha(cfg.WriteAlpha); err != nil {
		bad("WriteAlpha", "write-rate EWMA alpha", cfg.WriteAlpha, "must be > 0 and <= 1 (the weight of the newest sample)")
	}
	if err := CheckThresholdMs(cfg.ThresholdMs); err != nil {
		bad("ThresholdMs", "threshold", fmt.Sprintf("%v ms", cfg.ThresholdMs), err.Error())
	}
	if !(cfg.Headroom >= 0 && cfg.Headroom < 0.5) {
		bad("Headroom", "headroom", cfg.Headroom, fmt.Sprintf("must be a fraction >= 0 and < 0.5, e.g. %v", DefaultHeadroom))
	}
	if _, hi := control.DelayBoundsMs(); !(cfg.UMaxLimitMs >= 0 && cfg.UMaxLimitMs <= hi) {
		bad("UMaxLimitMs", "delay ceiling limit", fmt.Sprintf("%v ms", cfg.UMaxLimitMs), fmt.Sprintf("must be at most %v (at or under the starting ceiling, Control.UMaxMs, it keeps the ceiling fixed)", msDuration(hi)))
	}
	if CheckSignal(cfg.Signal) != nil {
		bad("Signal", "signal", strconv.Quote(cfg.Signal), "must be one of "+quoted(Signals()))
	}
	switch cfg.Direction {
	case direction.Write, direction.Read, direction.Both:
	default:
		bad("Direction", "direction", cfg.Direction, `must be one of "write", "read", "both"`)
	}
	p := cfg.Control
	p.TargetMs = 1 // per resource; the threshold is checked above
	p.T = cfg.Tick
	if p.T <= 0 {
		p.T = time.Millisecond // already reported above
	}
	if _, err := control.New(cfg.Controller, p); err != nil {
		errs = append(errs, err)
	}
	if err := control.CheckRules(cfg.RulesOff); err != nil {
		bad("RulesOff", "rules off", cfg.RulesOff, err.Error())
	}
	if _, err := cfg.policy(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// policy builds the policy cfg names; its errors are the policy's.
func (cfg Config) policy() (policy.Policy, error) {
	switch cfg.Policy {
	case policy.ReadOverWrite:
		return policy.NewReadOverWrite(cfg.WriteAlpha, cfg.JoinKBs, cfg.LeaveKBs)
	case policy.ManualName:
		return policy.NewManual(cfg.WriteAlpha, cfg.Manual)
	}
	return nil, fielderr.New("engine.Config.Policy", "policy", strconv.Quote(cfg.Policy), "must be one of "+quoted([]string{policy.ReadOverWrite, policy.ManualName}))
}

// CheckThresholdMs reports whether ms is a threshold the engine takes,
// the default's or a resource's, and if not, what it takes.
func CheckThresholdMs(ms float64) error {
	if d := time.Duration(ms * float64(time.Millisecond)); !(d >= minThreshold && d <= maxThreshold) {
		return fmt.Errorf("must be between %v and %v", minThreshold, maxThreshold)
	}
	return nil
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// ValidateTopology reports what in topo the engine cannot work with:
// unnamed or duplicate resources, invalid per-resource thresholds, and
// consumers without an address or device. SetTopology tolerates these
// (duplicates get separate state, consumers without a device are never
// measured); New rejects them.
func ValidateTopology(topo topology.Topology, cfg Config) error {
	var errs []error
	seen := make(map[string]bool, len(topo.Resources))
	for i, r := range topo.Resources {
		if r.Name == "" {
			errs = append(errs, fmt.Errorf("resource #%d has no name", i))
		} else if seen[r.Name] {
			errs = append(errs, fmt.Errorf("resource %q appears twice; resource names must be unique", r.Name))
		}
		seen[r.Name] = true
		if CheckSignal(r.Signal) != nil {
			errs = append(errs, fielderr.At("engine.Resource.Signal", "signal of resource", r.Name, strconv.Quote(r.Signal), "must be one of "+quoted(Signals())+`, or "" for the default`))
		}
		if err := CheckThresholdMs(r.ThresholdMs); r.ThresholdMs != 0 && err != nil {
			errs = append(errs, fielderr.At("engine.Resource.ThresholdMs", "threshold of resource", r.Name, fmt.Sprintf("%v ms", r.ThresholdMs), err.Error()+", or 0 for the default"))
		}
		for _, c := range r.Consumers {
			if !c.Addr.IsValid() {
				errs = append(errs, fmt.Errorf("resource %q: consumer on device %q has no IP address", r.Name, c.Device))
			}
			if c.Device == "" {
				errs = append(errs, fmt.Errorf("resource %q: consumer %v has no block device to measure", r.Name, c.Addr))
			}
		}
	}
	// Names can only be checked against consumers that are known: with
	// discovery the engine starts from an empty topology, and sessions log
	// in later.
	if m, ok := policyManual(cfg); ok && hasConsumers(topo) {
		if un := m.Unmatched(topo); len(un) > 0 {
			errs = append(errs, fmt.Errorf("manual policy: %v match no consumer of the topology (use an IP, IQN or device name)", un))
		}
	}
	return errors.Join(errs...)
}

func hasConsumers(topo topology.Topology) bool {
	for _, r := range topo.Resources {
		if len(r.Consumers) > 0 {
			return true
		}
	}
	return false
}

func policyManual(cfg Config) (*policy.Manual, bool) {
	if cfg.Policy != policy.ManualName {
		return nil, false
	}
	m, err := policy.NewManual(smoothing.ThesisAlpha, cfg.Manual)
	return m, err == nil
}
