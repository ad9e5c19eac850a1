package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/direction"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/discover"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/ctl"
)

// The configuration is data (internal/config): it checks its syntax and
// the keys only the daemon reads. Each value that configures another
// package is mapped here onto that package's own configuration, which
// the package validates once, with its bounds; a field it refuses is
// reported in the key the user wrote (keyOf), with the value as written.

// engineConfig maps c onto the engine's configuration.
func engineConfig(c config.Config) (engine.Config, error) {
	cfg := engine.DefaultConfig()
	cfg.Tick = c.Tick.Duration
	cfg.Alpha = c.EWMAAlpha
	cfg.Controller = c.Controller
	cfg.ThresholdMs = durMs(c.Threshold.Duration)
	cfg.Headroom = c.Headroom.Value
	cfg.Signal = c.Signal
	cfg.Control.Gains = gains(c.PID)
	cfg.Control.T = c.Tick.Duration
	// Unset, the limit follows u_max up from the default, within the
	// ceiling's bound: a u_max over it is refused as itself.
	_, hi := control.DelayBoundsMs()
	cfg.UMaxLimitMs = min(max(engine.DefaultUMaxLimitMs, cfg.Control.UMaxMs), hi)
	if c.PID.UMaxLimit.Duration != 0 {
		cfg.UMaxLimitMs = durMs(c.PID.UMaxLimit.Duration)
	}
	cfg.RulesOff = c.PID.RulesOff
	// The config's rates are bytes/s; the engine's kB are diskstats' (1024
	// bytes, two sectors).
	cfg.JoinKBs = float64(c.WriteThreshold) / 1024
	cfg.LeaveKBs = float64(c.WriteLeave) / 1024
	cfg.Policy = c.Policy
	cfg.Manual = engine.ManualConfig{Protected: c.Manual.Protected, Throttle: c.Manual.Throttle}
	d, err := direction.Parse(c.Direction)
	if err != nil {
		err = fielderr.New("direction.Direction", "direction", strconv.Quote(c.Direction), `must be one of "write", "read", "both"`)
	}
	cfg.Direction = d
	book, terr := tenantBook(c)
	cfg.Tenants = book
	return cfg, errors.Join(err, terr)
}

// gains are the [pid] section as control's gains.
func gains(p config.PID) control.Gains {
	return control.Gains{Kp: p.Kp, Ti: p.Ti.Duration, Td: p.Td.Duration, UMaxMs: durMs(p.UMax.Duration)}
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// backendOptions maps c onto the data path's options; small is
// --small-segment, smallSet whether it was given.
func backendOptions(c config.Config, small int, smallSet bool) (throttle.Options, error) {
	o := throttle.Options{Backend: c.Backend, Dev: c.Dev, RateDev: c.RateDev, SmallSegment: small, AckDelay: c.AckDelay}
	q, err := throttle.QueueNum(c.QueueNum)
	if err != nil {
		return o, err
	}
	o.QueueNum = q
	o.SmallSegments = smallSegments(c, small, smallSet)
	return o, nil
}

// smallSegments returns the split of each configured port: small_segment
// where set, else the protocol's default (throttle.DefaultSmallSegments),
// else def (the --small-segment flag). A def the operator gave (defSet)
// comes before the protocols' defaults.
func smallSegments(c config.Config, def int, defSet bool) map[uint16]int {
	set := map[uint16]int{}
	ports := make([]uint16, 0, len(c.Ports))
	for _, p := range c.Ports {
		if p >= 1 && p <= 65535 { // the others are refused (throttle.ValidatePorts)
			ports = append(ports, uint16(p))
		}
	}
	if defSet {
		for _, p := range ports {
			set[p] = def
		}
	}
	for k, v := range c.SmallSegment {
		if p, err := strconv.Atoi(k); err == nil && p >= 1 && p <= 65535 {
			set[uint16(p)] = v // its bound is the data path's
		}
	}
	return throttle.SmallSegmentsFor(ports, set, def)
}

// validateOwners has each package validate what c configures in it, and
// reports what they refuse in c's keys (path: the file, "" for none).
func validateOwners(c config.Config, path string, cfg engine.Config, o throttle.Options) error {
	errs := []error{
		cfg.Validate(),
		engine.ValidateTopology(sections(c), cfg),
		throttle.ValidatePorts(c.Ports),
		o.Validate(),
		staticSections(c),
		readRates(c, o),
		tenantReadCaps(c, o),
	}
	return inKeys(c, path, errors.Join(errs...))
}

// sections are the [resources."name"] sections as a topology without
// consumers, for the engine to check their thresholds and signals.
func sections(c config.Config) topology.Topology {
	var t topology.Topology
	for _, k := range slices.Sorted(maps.Keys(c.Resources)) {
		r := c.Resources[k]
		t.Resources = append(t.Resources, topology.Resource{Name: k, ThresholdMs: durMs(r.Threshold.Duration), Signal: r.Signal})
	}
	return t
}

// staticSections: with the static adapter the resources are known before
// discovery runs, so a [resources."name"] naming none of them is refused
// (discover.UnmatchedResources matches as discovery will). With tgt or
// LIO they are only known once discovery ran; the daemon warns then.
func staticSections(c config.Config) error {
	if c.Discovery.Adapter != "static" || len(c.Resources) == 0 {
		return nil
	}
	var t topology.Topology
	var names []string
	for _, s := range c.Static.Consumers {
		q := strconv.Quote(s.Resource)
		if slices.Contains(names, q) {
			continue
		}
		names = append(names, q)
		t.Resources = append(t.Resources, topology.Resource{Name: s.Resource}, topology.Resource{Name: topology.SanitizeName(s.Resource)})
	}
	if un := discover.UnmatchedResources(t, c); len(un) > 0 {
		return fmt.Errorf("resources.%q: names no resource of static.consumers (they are %s); fix the name or remove the section", un[0], strings.Join(names, ", "))
	}
	return nil
}

// readRates checks manual.read_rates as the control socket will take
// them, on a data path that can cap rates.
func readRates(c config.Config, o throttle.Options) error {
	if len(c.Manual.ReadRates) == 0 {
		return nil
	}
	if !o.CapsRates() {
		return errors.New("manual.read_rates needs a data path that caps rates: set rate_dev (--rate-dev) to the interface towards the initiators")
	}
	if throttle.ValidatePorts(c.Ports) != nil {
		return nil // refused as ports
	}
	ports := make([]uint16, 0, len(c.Ports))
	for _, p := range c.Ports {
		ports = append(ports, uint16(p))
	}
	var scratch ctl.Overrides
	return scratch.SetReadRates(c.Manual.ReadRates, ports)
}

// inKeys rewrites the field errors in err as errors of c's keys: "tick =
// 1ms: must be between 10ms and 10s". Errors of fields no key sets, and
// errors that name their keys already, stay as their owner wrote them.
// Each is said to be the file's (path) unless a flag set its key.
func inKeys(c config.Config, path string, err error) error {
	fields, other := fielderr.Split(err)
	var out []error
	said := map[string]bool{} // a flag's value refused as itself and per port
	for _, f := range fields {
		k, ok := keyOf(c, f)
		if !ok {
			out = append(out, f)
			continue
		}
		e := c.KeyError(k.key, k.value, f.Want+k.hint)
		if path != "" && c.Origin(k.key) == "" && !strings.HasPrefix(k.key, "--") {
			e = fmt.Errorf("config %s: %w", path, e)
		}
		if !said[e.Error()] {
			out = append(out, e)
		}
		said[e.Error()] = true
	}
	for _, e := range other {
		if path != "" {
			e = fmt.Errorf("config %s: %w", path, e)
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// key is where a field's value came from: the key, its value as c has
// it, and what to add to the owner's words for a user of the file.
type key struct {
	key   string
	value any
	hint  string
}

// keyOf maps an owner's field to the key of c that set it.
func keyOf(c config.Config, f *fielderr.Error) (key, bool) {
	if k, ok := tenantKey(c, f); ok {
		return k, true
	}
	q := strconv.Quote
	switch f.Field {
	case "engine.Resource.ThresholdMs":
		return key{fmt.Sprintf("resources.%q.threshold", f.Key), c.Resources[f.Key].Threshold, ""}, true
	case "engine.Resource.Signal":
		return key{fmt.Sprintf("resources.%q.signal", f.Key), q(c.Resources[f.Key].Signal), ""}, true
	case "throttle.Options.SmallSegments":
		if _, ok := c.SmallSegment[f.Key]; ok {
			return key{fmt.Sprintf("small_segment.%q", f.Key), f.Value, ""}, true
		}
		return key{"--small-segment", f.Value, ""}, true
	}
	byField := map[string]key{
		"engine.Config.Tick":            {"tick", c.Tick, ""},
		"control.Params.T":              {"tick", c.Tick, ""},
		"engine.Config.Alpha":           {"ewma_alpha", c.EWMAAlpha, ""},
		"engine.Config.ThresholdMs":     {"threshold", c.Threshold, ""},
		"engine.Config.Headroom":        {"headroom", c.Headroom, ""},
		"engine.Config.UMaxLimitMs":     {"pid.u_max_limit", c.PID.UMaxLimit, ""},
		"engine.Config.RulesOff":        {"pid.rules_off", c.PID.RulesOff, ""},
		"direction.Direction":           {"direction", q(c.Direction), ""},
		"engine.Config.Signal":          {"signal", q(c.Signal), ""},
		"engine.Config.Policy":          {"policy", q(c.Policy), ""},
		"control.LoopConfig.Law":        {"controller", q(c.Controller), ""},
		"control.Params.Kp":             {"pid.kp", c.PID.Kp, ""},
		"control.Params.Ti":             {"pid.ti", c.PID.Ti, ""},
		"control.Params.Td":             {"pid.td", c.PID.Td, ""},
		"control.Params.UMaxMs":         {"pid.u_max", c.PID.UMax, ""},
		"policy.ReadOverWrite.JoinKBs":  {"write_threshold", c.WriteThreshold, ""},
		"policy.ReadOverWrite.LeaveKBs": {"write_leave", c.WriteLeave, fmt.Sprintf(", write_threshold (%v)", c.WriteThreshold)},
		"policy.ManualConfig.Protected": {"manual.protected", c.Manual.Protected, ""},
		"policy.ManualConfig.Throttle":  {"manual.throttle", c.Manual.Throttle, ""},
		"throttle.Options.Backend":      {"backend", q(c.Backend), ""},
		"throttle.Options.Dev":          {"dev", q(c.Dev), ""},
		"throttle.Options.RateDev":      {"rate_dev", q(c.RateDev), ""},
		"throttle.Options.QueueNum":     {"queue_num", c.QueueNum, ""},
		"throttle.Options.SmallSegment": {"--small-segment", f.Value, ""},
		"throttle.Ports":                {"ports", c.Ports, ""},
	}
	k, ok := byField[f.Field]
	return k, ok
}
