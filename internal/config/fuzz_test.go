package config

import (
	"os"
	"testing"
)

// FuzzDecode: the configuration file is read as root at start and at every
// SIGHUP; any text must give a valid configuration or an error, never a
// panic, and what is accepted must stay valid.
func FuzzDecode(f *testing.F) {
	if b, err := os.ReadFile("../../deploy/sanqos.example.toml"); err == nil {
		f.Add(string(b))
	}
	f.Add("tick = \"50ms\"\n[pid]\nkp = nan\n")
	f.Add("[discovery]\nadapter = \"static\"\n[[static.consumers]]\nresource = \"p\"\naddr = \"10.0.0.3\"\ndevice = \"loop1\"\n[resources.\"p\"]\nthreshold = \"20ms\"\n")
	f.Add("record_max_size = 1e400\nwrite_threshold = \"-1kB/s\"\nlisten = \"[::]:1\"\n")
	f.Fuzz(func(t *testing.T, text string) {
		c := Default()
		if err := c.decode(text); err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			return
		}
		_ = c.Warnings()
		if err := c.Validate(); err != nil {
			t.Fatalf("valid once, invalid the second time: %v", err)
		}
	})
}
