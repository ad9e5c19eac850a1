package discover

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

func TestNewAdapter(t *testing.T) {
	for _, name := range []string{"tgt", "lio", "static"} {
		c := config.Default()
		c.Discovery.Adapter = name
		c.Static.Consumers = []config.StaticConsumer{{Resource: "p", Addr: "192.0.2.1", Device: "sda"}}
		a, err := NewAdapter(c)
		if err != nil || a.Name() != name {
			t.Errorf("NewAdapter(%s) = %v, %v", name, a, err)
		}
	}
	c := config.Default()
	c.Discovery.Adapter = "iet"
	if _, err := NewAdapter(c); err == nil {
		t.Error("unknown adapter accepted")
	}
}

func TestStaticFromConfigAndThresholds(t *testing.T) {
	c := config.Default()
	c.Discovery.Adapter = "static"
	c.Static.Consumers = []config.StaticConsumer{
		{Resource: "Gold Pool", Addr: "192.0.2.1", Device: "/dev/sde"},
		{Resource: "Gold Pool", Addr: "192.0.2.2", Device: "/dev/loop0"},
	}
	c.Resources = map[string]config.Resource{"Gold Pool": {Threshold: config.Duration{Duration: 8 * time.Millisecond}}}
	a, err := NewAdapter(c)
	if err != nil {
		t.Fatal(err)
	}
	res := topology.NewResolver("../topology/testdata/sys", "../topology/testdata/dev", "../topology/testdata/mountinfo")
	topo, err := New(a, res, nil).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	topo = ApplyThresholds(topo, c)
	// sde and loop0 (on sda) share nothing, but the configuration puts
	// them in one resource.
	if len(topo.Resources) != 1 || topo.Resources[0].Name != "gold-pool" || len(topo.Resources[0].Consumers) != 2 || topo.Resources[0].ThresholdMs != 8 {
		t.Errorf("topology = %+v", topo)
	}
}

func TestUnmatchedResources(t *testing.T) {
	c := config.Default()
	c.Resources = map[string]config.Resource{"Gold Pool": {}, "typo": {}, "vg-a": {}}
	topo := topology.Topology{Resources: []topology.Resource{{Name: "gold-pool"}, {Name: "vg-a"}}}
	if got := UnmatchedResources(topo, c); !slices.Equal(got, []string{"typo"}) {
		t.Errorf("UnmatchedResources = %q, want [typo]", got)
	}
}
