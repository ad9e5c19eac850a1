package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/direction"
	"github.com/sanqos/sanqos/internal/policy"
	"github.com/sanqos/sanqos/internal/smoothing"
	"github.com/sanqos/sanqos/internal/topology"
)

func (cfg Config) validate() error {
	var errs []error
	if cfg.Tick <= 0 {
		errs = append(errs, fmt.Errorf("tick %v: want a positive period, e.g. 100ms", cfg.Tick))
	}
	if err := smoothing.CheckAlpha(cfg.Alpha); err != nil {
		errs = append(errs, fmt.Errorf("read-latency %w", err))
	}
	if err := smoothing.CheckAlpha(cfg.WriteAlpha); err != nil {
		errs = append(errs, fmt.Errorf("write-rate %w", err))
	}
	if !(cfg.UMaxLimitMs >= 0) || math.IsInf(cfg.UMaxLimitMs, 0) {
		errs = append(errs, fmt.Errorf("delay ceiling limit %v ms: want 0 (fixed at u_max) or a delay, e.g. %v", cfg.UMaxLimitMs, DefaultUMaxLimitMs))
	}
	if err := CheckSignal(cfg.Signal); err != nil {
		errs = append(errs, err)
	}
	if !(cfg.Headroom >= 0 && cfg.Headroom < 0.5) {
		errs = append(errs, fmt.Errorf("headroom %v: want a fraction in [0, 0.5), e.g. 0.15", cfg.Headroom))
	}
	switch cfg.Direction {
	case direction.Write, direction.Read, direction.Both:
	default:
		errs = append(errs, fmt.Errorf("direction %v: want write, read or both", cfg.Direction))
	}
	if !(cfg.ThresholdMs > 0) || math.IsInf(cfg.ThresholdMs, 0) {
		errs = append(errs, fmt.Errorf("threshold %v ms: want a positive latency, e.g. 15", cfg.ThresholdMs))
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
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
		if err := CheckSignal(r.Signal); err != nil {
			errs = append(errs, fmt.Errorf("resource %q: %w", r.Name, err))
		}
		if r.ThresholdMs < 0 || math.IsNaN(r.ThresholdMs) || math.IsInf(r.ThresholdMs, 0) {
			errs = append(errs, fmt.Errorf("resource %q: threshold %v ms: want a positive latency, or 0 for the default", r.Name, r.ThresholdMs))
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
