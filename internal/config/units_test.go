package config

import (
	"math"
	"testing"
)

// TestRateUnits: issue 34. kB and MB are SI (1000), KiB and MiB binary
// (1024), in the file and on the command line alike; the engine counts
// in KiB/s (diskstats' two sectors, what 'sanqos status' heads KiB/s),
// so EngineConfig divides bytes by 1024, never by 1000.
func TestRateUnits(t *testing.T) {
	for _, c := range []struct {
		text      string
		bytes     float64
		engineKiB float64
	}{
		{"500kB/s", 500e3, 500e3 / 1024},
		{"500KB/s", 500e3, 500e3 / 1024},
		{"512KiB/s", 512 * 1024, 512},
		{"1.5MB/s", 1.5e6, 1.5e6 / 1024},
		{"2MiB/s", 2 << 20, 2048},
		{"800B/s", 800, 800.0 / 1024},
		{"500", 500e3, 500e3 / 1024}, // a bare number is kB/s
	} {
		var r Rate
		if err := r.UnmarshalText([]byte(c.text)); err != nil {
			t.Errorf("%s: %v", c.text, err)
			continue
		}
		if float64(r) != c.bytes {
			t.Errorf("%s = %v B/s, want %v", c.text, float64(r), c.bytes)
		}
		cfg := Default()
		cfg.WriteThreshold, cfg.WriteLeave = r, r/2
		if got := cfg.EngineConfig().JoinKBs; math.Abs(got-c.engineKiB) > 1e-9 {
			t.Errorf("%s: engine threshold %v KiB/s, want %v", c.text, got, c.engineKiB)
		}
	}
	// String writes the SI unit it names.
	for r, want := range map[Rate]string{500e3: "500kB/s", 1.5e6: "1.5MB/s", 512 * 1024: "524.288kB/s"} {
		if got := r.String(); got != want {
			t.Errorf("%v.String() = %q, want %q", float64(r), got, want)
		}
	}
}
