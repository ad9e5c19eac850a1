package sim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// SimGains is the pid tuning found against this simulator, adopted as
// control.DefaultGains: the gains with the lowest worst-case
// p95/threshold over thresholds 10, 15, 20 ms and seeds 1–4 in a sweep
// of Kp 0.3–0.8, Ti 200–500 ms, Td 0–50 ms (worst 1.17; higher Kp costs
// write throughput for no gain in p95); TestThresholdsFitTheDevice holds
// them from 0.2 to 50 ms.
func SimGains() Gains { return control.DefaultGains() }

// engineStepper drives the production engine: the simulated diskstats
// text was already parsed by the production parser.
type engineStepper struct {
	e     *engine.Engine
	plant *plantSource
	probe bool
}

// plantSource lets the engine, made before the plant, ask the plant for
// its reads in flight and, with the probe on, its block-layer probe's
// tick (RunWith connects them).
type plantSource struct {
	p    *plant
	tick map[string]probeTick
}

func (f *plantSource) ReadsInFlight(device string) (uint64, bool) {
	if f.p == nil {
		return 0, false
	}
	return f.p.ReadsInFlight(device)
}

func (f *plantSource) TickReads(device string) (latency.Ops, time.Duration, int, bool) {
	t, ok := f.tick[device]
	return t.reads, t.oldest, t.inFlight, ok
}

func (s engineStepper) attach(p *plant) { s.plant.p = p }

// resourceName is the shared resource of the scenario (the thesis's
// volume group was "vg_aic").
const resourceName = "vg-sim"

// Topology is the scenario as discovery would report it: one resource,
// one consumer per device.
func (sc Scenario) Topology() topology.Topology {
	r := topology.Resource{Name: resourceName}
	for i := range sc.Disk.Spindles {
		r.Leaves = append(r.Leaves, fmt.Sprintf("sim%d", i))
	}
	for _, d := range sc.Devices {
		r.Consumers = append(r.Consumers, topology.Consumer{
			Addr: d.Addr, Device: d.Name, IQNs: []string{"iqn.2010-05.sim:" + d.Name},
			Target: "iqn.2010-05.sim:target", Backing: "/dev/vg-sim/" + d.Name,
		})
	}
	return topology.Topology{Resources: []topology.Resource{r}}
}

// EngineConfig is the engine configuration a run uses.
func (cfg Config) EngineConfig() engine.Config {
	ec := engine.DefaultConfig()
	ec.Tick = cfg.Tick
	ec.Controller = cfg.Controller
	ec.ThresholdMs = cfg.ThresholdMs
	ec.Signal = cfg.Signal
	ec.RulesOff = cfg.RulesOff
	ec.Tenants = cfg.Scenario.Tenants
	if g := cfg.Gains; g.Kp > 0 {
		td := g.Td
		g = g.WithDefaults()
		g.Td = td // 0 is no D term here, as it was
		ec.Control.Gains = g
	}
	return ec
}

func newEngineStepper(cfg Config) (Stepper, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	ec := cfg.EngineConfig()
	f := &plantSource{tick: map[string]probeTick{}}
	ec.InFlight = f
	if !cfg.NoProbe {
		ec.Fine = f
	}
	e, err := engine.New(ec, cfg.Scenario.Topology())
	if err != nil {
		return nil, fmt.Errorf("setting up the engine: %w", err)
	}
	return engineStepper{e, f, !cfg.NoProbe}, nil
}

func (s engineStepper) Step(now time.Time, snap []diskstats.Stat) Decision {
	return simDecision(s.decide(now, snap))
}

// decide samples the plant's probe for the tick, as the daemon does
// before the engine's step, and steps the engine: its whole decision.
func (s engineStepper) decide(now time.Time, snap []diskstats.Stat) engine.Decision {
	if s.probe && s.plant.p != nil {
		s.plant.p.sampleProbe(now, s.plant.tick)
	}
	return s.e.Step(now, snap)
}

// simDecision is what the plant applies of the engine's decision: the
// scenario's resource's.
func simDecision(d engine.Decision) Decision {
	for _, r := range d.Resources {
		if r.Name == resourceName {
			return Decision{SignalMs: r.SignalMs, RawMs: r.RawMs, DelayMs: r.DelayMs, Members: r.Members,
				Armed: r.Returning, ArmedMs: r.ControlMs,
				Own: r.Own, ThresholdMs: r.ThresholdMs, ThresholdBy: r.ThresholdBy, Conflict: r.Conflict}
		}
	}
	return Decision{}
}

// fixedStepper delays the writers' packets by a constant, whatever the
// disk does: the frontier's static throttle.
type fixedStepper struct {
	writers []netip.Addr
	delayMs float64
}

func (f fixedStepper) Step(time.Time, []diskstats.Stat) Decision {
	return Decision{DelayMs: f.delayMs, Members: f.writers}
}

// writers are the addresses of the scenario's writing consumers.
func (sc Scenario) writers() []netip.Addr {
	var out []netip.Addr
	for _, d := range sc.Devices {
		if !d.Reader {
			out = append(out, d.Addr)
		}
	}
	return out
}
