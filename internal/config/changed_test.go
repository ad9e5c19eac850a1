package config

import (
	"slices"
	"testing"
	"time"
)

// TestChanged: a reload logs the keys it changed, in the file's spelling.
func TestChanged(t *testing.T) {
	base := Default()
	for _, c := range []struct {
		name string
		edit func(c *Config)
		want []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"threshold", func(c *Config) { c.Threshold = Duration{20 * time.Millisecond} }, []string{"threshold"}},
		{"pid gain and ports", func(c *Config) { c.PID.Kp = 2; c.Ports = []int{3260, 2049} }, []string{"pid.kp", "ports"}},
		{"resource added", func(c *Config) {
			c.Resources = map[string]Resource{"vg-data": {Threshold: Duration{5 * time.Millisecond}}}
		}, []string{"resources.vg-data.signal", "resources.vg-data.threshold"}},
		{"queue and dev", func(c *Config) { c.QueueNum = 7; c.Dev = "eth1" }, []string{"dev", "queue_num"}},
		{"tenants", func(c *Config) {
			share, limit := 4.0, Rate(50e6)
			c.Tenants = Tenants{Conflict: "reservation", Class: map[string]TenantTerms{"gold": {Share: &share}},
				Consumer: []TenantConsumer{{Name: "db1", Match: []string{"10.0.0.5"}, TenantTerms: TenantTerms{Cap: &limit}}}}
		}, []string{"tenants.class.gold.share", "tenants.conflict", "tenants.consumer"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := Default()
			c.edit(&b)
			if got := Changed(base, b); !slices.Equal(got, c.want) {
				t.Errorf("Changed = %v, want %v", got, c.want)
			}
		})
	}
}
