package config

import (
	"time"

	"github.com/sanqos/sanqos/internal/control"
	"github.com/sanqos/sanqos/internal/direction"
	"github.com/sanqos/sanqos/internal/engine"
)

// Gains are the [pid] section as control's gains.
func (p PID) Gains() control.Gains {
	return control.Gains{Kp: p.Kp, Ti: p.Ti.Duration, Td: p.Td.Duration, UMaxMs: durMs(p.UMax.Duration)}
}

// EngineConfig maps a configuration that Validate accepted onto the
// engine's. Validate is the one place a configuration is checked: it
// checks everything the engine would (engine.New does not fail on the
// result), so the daemon does not build a trial engine to find out.
func (c *Config) EngineConfig() engine.Config {
	cfg := engine.DefaultConfig()
	cfg.Tick = c.Tick.Duration
	cfg.Alpha = c.EWMAAlpha
	cfg.Controller = c.Controller
	cfg.ThresholdMs = durMs(c.Threshold.Duration)
	cfg.Headroom = c.Headroom.Value
	cfg.Signal = c.Signal
	cfg.Control.Gains = c.PID.Gains()
	cfg.Control.T = c.Tick.Duration
	cfg.UMaxLimitMs = max(engine.DefaultUMaxLimitMs, cfg.Control.UMaxMs)
	if c.PID.UMaxLimit.Duration > 0 {
		cfg.UMaxLimitMs = durMs(c.PID.UMaxLimit.Duration)
	}
	// The config's rates are bytes/s; the engine's kB are diskstats' (1024
	// bytes, two sectors).
	cfg.JoinKBs = float64(c.WriteThreshold) / 1024
	cfg.LeaveKBs = float64(c.WriteLeave) / 1024
	cfg.Policy = c.Policy
	cfg.Manual = engine.ManualConfig{Protected: c.Manual.Protected, Throttle: c.Manual.Throttle}
	if d, err := direction.Parse(c.Direction); err == nil {
		cfg.Direction = d // Validate took only the names ParseDirection reads
	}
	return cfg
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
