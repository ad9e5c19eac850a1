package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/units"
)

// Duration is a time.Duration written as a Go duration string in TOML
// ("100ms", "1.5s").
type Duration struct{ time.Duration }

// UnmarshalTOML accepts a duration string; a bare number is rejected
// because its unit would be a guess.
func (d *Duration) UnmarshalTOML(v any) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("%v: must be a duration string with a unit, like \"100ms\"", v)
	}
	return d.UnmarshalText([]byte(s))
}

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%q: must be a duration like \"100ms\" or \"1.5s\"", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Rate is a data rate in bytes per second, written "500kB/s", "1.5MB/s",
// "512KiB/s", "800B/s", or as a bare number of kB/s (what 'sanqos run
// --write-threshold 500' has always meant). The units are SI where
// spelled so and binary where spelled so: kB and MB are 1000 and 10^6
// bytes, KiB and MiB 1024 and 2^20; 'sanqos status' and the engine count
// in KiB (diskstats' two sectors), and the daemon converts.
type Rate float64

// unit is a suffix and what it multiplies by.
type unit struct {
	suffix string
	mult   float64
}

// withUnit reads "<number><unit>", the unit one of units (longer suffixes
// first where one ends another) or none, which means bare.
func withUnit(b []byte, units []unit, bare float64) (float64, error) {
	s := strings.TrimSpace(string(b))
	mult := bare
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	return f * mult, err
}

// UnmarshalTOML accepts a number (kB/s) or a string with a unit.
func (r *Rate) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*r = Rate(x) * 1e3
		return nil
	case float64:
		*r = Rate(x * 1e3)
		return nil
	case string:
		return r.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("%v: must be a rate like \"500kB/s\"", v)
}

// UnmarshalText parses a rate string.
func (r *Rate) UnmarshalText(b []byte) error {
	// The units are the data path's (units.RateBytes); a bare number is
	// kB/s.
	v, ok, err := units.RateBytes(string(b))
	if !ok && err == nil {
		v, err = strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		v *= 1e3
	}
	if err != nil {
		return fmt.Errorf("%q: must be a rate like \"500kB/s\", \"2MB/s\", \"512KiB/s\" or a bare number of kB/s", b)
	}
	*r = Rate(v)
	return nil
}

// String writes the rate in kB/s or MB/s.
func (r Rate) String() string {
	if r >= 1e6 {
		return strconv.FormatFloat(float64(r)/1e6, 'g', -1, 64) + "MB/s"
	}
	return strconv.FormatFloat(float64(r)/1e3, 'g', -1, 64) + "kB/s"
}

// MarshalText writes the rate string.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Size is a number of bytes, written "64MiB", "500MB", "1GiB", "4096B" or
// as a bare number of bytes.
type Size int64

var sizeUnits = []unit{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

// UnmarshalTOML accepts a number of bytes or a string with a unit.
func (z *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*z = Size(x)
		return nil
	case string:
		return z.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("%v: must be a size like \"64MiB\"", v)
}

// UnmarshalText parses a size string.
func (z *Size) UnmarshalText(b []byte) error {
	v, err := withUnit(b, sizeUnits, 1)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v > math.MaxInt64/2 {
		return fmt.Errorf("%q: must be a size like \"64MiB\", \"500MB\" or a number of bytes", b)
	}
	*z = Size(v)
	return nil
}

// String writes the size in MiB when whole, else in bytes.
func (z Size) String() string {
	if z%(1<<20) == 0 && z != 0 {
		return strconv.FormatInt(int64(z)>>20, 10) + "MiB"
	}
	return strconv.FormatInt(int64(z), 10) + "B"
}

// MarshalText writes the size string.
func (z Size) MarshalText() ([]byte, error) { return []byte(z.String()), nil }

// Headroom is the fraction of the threshold the controller aims below it
// (internal/decide/control, step 5 "Headroom"). "auto", a headroom measured per
// resource, was removed (docs/ablation.md): it still parses, for
// Validate to say so.
type Headroom struct {
	Auto  bool
	Value float64 // the fixed fraction; unused when Auto
}

// UnmarshalTOML accepts "auto" or a number.
func (h *Headroom) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case string:
		return h.UnmarshalText([]byte(x))
	case float64:
		*h = Headroom{Value: x}
	case int64:
		*h = Headroom{Value: float64(x)}
	default:
		return fmt.Errorf("%v: must be a fraction like 0.15", v)
	}
	return nil
}

// UnmarshalText parses "auto" or a number.
func (h *Headroom) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "auto" {
		*h = Headroom{Auto: true}
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("%q: must be a fraction like 0.15", s)
	}
	*h = Headroom{Value: v}
	return nil
}

// String is "auto" or the fraction.
func (h Headroom) String() string {
	if h.Auto {
		return "auto"
	}
	return strconv.FormatFloat(h.Value, 'g', -1, 64)
}

// MarshalText writes String.
func (h Headroom) MarshalText() ([]byte, error) { return []byte(h.String()), nil }
