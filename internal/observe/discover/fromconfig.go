package discover

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// NewAdapter builds the adapter the configuration names.
func NewAdapter(c config.Config) (Adapter, error) {
	switch c.Discovery.Adapter {
	case "tgt":
		return NewTgt(ExecRunner{Path: "tgtadm", Timeout: 5 * time.Second}, c.Discovery.TgtControlPort), nil
	case "lio":
		return NewLIO(c.Discovery.LIORoot), nil
	case "static":
		list := make([]StaticConsumer, len(c.Static.Consumers))
		for i, s := range c.Static.Consumers {
			list[i] = StaticConsumer{Resource: s.Resource, Addr: s.Addr, Device: s.Device}
		}
		return NewStatic(list)
	case "socket":
		return NewSocket(SocketConfig{Ports: c.Ports, Exports: c.Discovery.Exports})
	}
	return nil, fmt.Errorf("discovery.adapter = %q: must be one of \"tgt\", \"lio\", \"static\", \"socket\"", c.Discovery.Adapter)
}

// FromConfig returns a Discoverer for the running system as configured
// (real sysfs, /dev and mountinfo). Per-resource thresholds are not part
// of discovery: pass each topology through ApplyThresholds.
func FromConfig(c config.Config, logger *slog.Logger) (*Discoverer, error) {
	a, err := NewAdapter(c)
	if err != nil {
		return nil, err
	}
	return New(a, topology.DefaultResolver(), logger), nil
}

// ApplyThresholds sets each resource's ThresholdMs and Signal from the
// configuration's [resources."name"] sections (0, "" = the default). A
// key matches the resource name as shown, or after the same sanitizing
// (so [resources."Gold Pool"] matches resource "gold-pool").
func ApplyThresholds(t topology.Topology, c config.Config) topology.Topology {
	byName := map[string]config.Resource{}
	for k, r := range c.Resources {
		byName[topology.SanitizeName(k)] = r
	}
	for k, r := range c.Resources {
		byName[k] = r // exact keys win
	}
	for i := range t.Resources {
		r := byName[t.Resources[i].Name]
		if d := r.Threshold.Duration; d > 0 {
			t.Resources[i].ThresholdMs = float64(d) / float64(time.Millisecond)
		}
		if r.Signal != "" {
			t.Resources[i].Signal = r.Signal
		}
	}
	return t
}

// UnmatchedResources returns the [resources."name"] keys of c that match
// no resource of t, exactly or sanitized, sorted: a typo there would
// otherwise leave the default threshold in force without a word.
func UnmatchedResources(t topology.Topology, c config.Config) []string {
	have := map[string]bool{}
	for _, r := range t.Resources {
		have[r.Name] = true
	}
	var out []string
	for k := range c.Resources {
		if !have[k] && !have[topology.SanitizeName(k)] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
