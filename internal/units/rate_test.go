package units

import (
	"math"
	"testing"
)

func TestRateBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		ok, bad bool
	}{
		{"500kB/s", 500e3, true, false},
		{"512KiB/s", 512 * 1024, true, false},
		{" 2 MB/s ", 2e6, true, false},
		{"80Mbit/s", 10e6, true, false},
		{"80mbit", 10e6, true, false}, // tc's spelling
		{"800B/s", 800, true, false},
		{"500", 0, false, false}, // no unit: the caller decides
		{"10mb", 0, true, true},  // megabytes or megabits: refused
		{"MB/s", 0, true, true},
		{"1e400MB/s", 0, true, true},
	}
	for _, tt := range tests {
		got, ok, err := RateBytes(tt.in)
		if ok != tt.ok || (err != nil) != tt.bad {
			t.Errorf("%q: ok %v err %v, want ok %v bad %v", tt.in, ok, err, tt.ok, tt.bad)
			continue
		}
		if !tt.bad && math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%q: %v bytes/s, want %v", tt.in, got, tt.want)
		}
	}
}
