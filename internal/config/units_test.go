package config

import "testing"

// TestRateUnits: issue 34. kB and MB are SI (1000), KiB and MiB binary
// (1024), in the file and on the command line alike (what the engine
// makes of them: cmd/sanqos's TestRateUnitsReachTheEngine).
func TestRateUnits(t *testing.T) {
	for _, c := range []struct {
		text  string
		bytes float64
	}{
		{"500kB/s", 500e3},
		{"500KB/s", 500e3},
		{"512KiB/s", 512 * 1024},
		{"1.5MB/s", 1.5e6},
		{"2MiB/s", 2 << 20},
		{"800B/s", 800},
		{"500", 500e3}, // a bare number is kB/s
	} {
		var r Rate
		if err := r.UnmarshalText([]byte(c.text)); err != nil {
			t.Errorf("%s: %v", c.text, err)
			continue
		}
		if float64(r) != c.bytes {
			t.Errorf("%s = %v B/s, want %v", c.text, float64(r), c.bytes)
		}
	}
	// String writes the SI unit it names.
	for r, want := range map[Rate]string{500e3: "500kB/s", 1.5e6: "1.5MB/s", 512 * 1024: "524.288kB/s"} {
		if got := r.String(); got != want {
			t.Errorf("%v.String() = %q, want %q", float64(r), got, want)
		}
	}
}
