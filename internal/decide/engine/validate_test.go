package engine

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// TestValidateNamesTheField: every refusal of Validate (the controller's
// and the policy's included) names the field it refuses, so that the
// daemon can name the configuration key that set it; the bounds are the
// engine's own, once.
func TestValidateNamesTheField(t *testing.T) {
	tests := []struct {
		name  string
		mod   func(*Config)
		field string
	}{
		{"tick under 10ms", func(c *Config) { c.Tick = time.Millisecond }, "engine.Config.Tick"},
		{"tick over 10s", func(c *Config) { c.Tick = 11 * time.Second }, "engine.Config.Tick"},
		{"alpha 0", func(c *Config) { c.Alpha = 0 }, "engine.Config.Alpha"},
		{"threshold under 100µs", func(c *Config) { c.ThresholdMs = 0.05 }, "engine.Config.ThresholdMs"},
		{"threshold NaN", func(c *Config) { c.ThresholdMs = math.NaN() }, "engine.Config.ThresholdMs"},
		{"headroom 0.5", func(c *Config) { c.Headroom = 0.5 }, "engine.Config.Headroom"},
		{"ceiling limit over 1s", func(c *Config) { c.UMaxLimitMs = 1001 }, "engine.Config.UMaxLimitMs"},
		{"signal", func(c *Config) { c.Signal = "p50" }, "engine.Config.Signal"},
		{"direction", func(c *Config) { c.Direction = 0 }, "engine.Config.Direction"},
		{"controller", func(c *Config) { c.Controller = "lqr" }, "control.LoopConfig.Law"},
		{"kp", func(c *Config) { c.Control.Kp = math.Inf(1) }, "control.Params.Kp"},
		{"ti over 1h", func(c *Config) { c.Control.Ti = 2 * time.Hour }, "control.Params.Ti"},
		{"u_max over 1s", func(c *Config) { c.Control.UMaxMs = 1500 }, "control.Params.UMaxMs"},
		{"policy", func(c *Config) { c.Policy = "fair" }, "engine.Config.Policy"},
		{"leave above join", func(c *Config) { c.LeaveKBs = 2 * c.JoinKBs }, "policy.ReadOverWrite.LeaveKBs"},
		{"manual without protected", func(c *Config) { c.Policy, c.Manual = "manual", ManualConfig{Throttle: []string{"10.0.0.3"}} }, "policy.ManualConfig.Protected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			fields, other := fielderr.Split(cfg.Validate())
			if len(other) > 0 {
				t.Errorf("errors without a field: %v", other)
			}
			var got []string
			for _, f := range fields {
				got = append(got, f.Field)
			}
			if !slices.Equal(got, []string{tt.field}) {
				t.Errorf("fields %v, want [%s]", got, tt.field)
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
}

func TestValidateTopologyNamesTheResource(t *testing.T) {
	topo := topology.Topology{Resources: []topology.Resource{{Name: "db", ThresholdMs: 0.01}, {Name: "logs", Signal: "p50"}, {Name: "default"}}}
	fields, other := fielderr.Split(ValidateTopology(topo, DefaultConfig()))
	if len(other) > 0 || len(fields) != 2 {
		t.Fatalf("fields %v, other %v; want the threshold of db and the signal of logs", fields, other)
	}
	if f := fields[0]; f.Field != "engine.Resource.ThresholdMs" || f.Key != "db" {
		t.Errorf("first: %+v, want db's threshold", f)
	}
	if f := fields[1]; f.Field != "engine.Resource.Signal" || f.Key != "logs" {
		t.Errorf("second: %+v, want logs' signal", f)
	}
}
