package sim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/diskstats"
	"github.com/sanqos/sanqos/internal/signal"
)

// SimGains is the pid tuning found against this simulator.
func SimGains() Gains {
	d := control.DefaultParams()
	return Gains{Kp: d.Kp, TiMs: float64(d.Ti.Milliseconds()), TdMs: float64(d.Td.Milliseconds()), UMaxMs: d.UMaxMs}
}

// interimStepper is the control path until internal/engine lands: the
// production signal and control packages, wired the way the engine does.
type interimStepper struct {
	ewma    *signal.EWMA
	ctl     control.Controller
	prev    map[string]diskstats.Stat
	addr    map[string]netip.Addr
	readers map[string]bool
}

func newEngineStepper(cfg Config) (Stepper, error) {
	p := control.DefaultParams()
	p.ThresholdMs = cfg.ThresholdMs
	p.T = cfg.Tick
	if g := cfg.Gains; g.Kp > 0 {
		p.Kp, p.Ti, p.Td, p.UMaxMs = g.Kp, time.Duration(g.TiMs*float64(time.Millisecond)), time.Duration(g.TdMs*float64(time.Millisecond)), g.UMaxMs
	}
	ctl, err := control.New(cfg.Controller, p)
	if err != nil {
		return nil, fmt.Errorf("setting up the %s controller: %w", cfg.Controller, err)
	}
	e, _ := signal.NewEWMA(signal.ThesisAlpha)
	st := &interimStepper{ewma: e, ctl: ctl, prev: map[string]diskstats.Stat{}, addr: map[string]netip.Addr{}}
	for _, d := range cfg.Scenario.Devices {
		st.addr[d.Name] = d.Addr
	}
	return st, nil
}

func (s *interimStepper) Step(now time.Time, snap []diskstats.Stat) Decision {
	var rl signal.ReadLatency
	var members []netip.Addr
	for _, st := range snap {
		prev, ok := s.prev[st.Device]
		s.prev[st.Device] = st
		if !ok {
			continue
		}
		d := diskstats.Sub(&st, &prev)
		rl.Add(d.ReadIOs, d.ReadTicks)
		if d.WriteSectors > 0 {
			members = append(members, s.addr[st.Device])
		}
	}
	raw, ok := rl.Value()
	var sig float64
	if ok {
		sig = s.ewma.Update(raw)
	} else {
		sig = s.ewma.Decay()
	}
	return Decision{SignalMs: sig, RawMs: raw, DelayMs: s.ctl.Update(sig), Members: members}
}
