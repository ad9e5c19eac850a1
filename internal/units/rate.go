// Package units reads the data rates people write ("10MB/s", "512KiB/s",
// "80Mbit/s") as bytes per second: one spelling for the configuration
// file, its flags and the data path's rate caps, so that a rate means the
// same wherever it is written. It judges no value; its users bound them.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are the rate units RateBytes knows, in bytes per second.
var rateUnits = map[string]float64{
	"B/s": 1, "kB/s": 1e3, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9,
	"KiB/s": 1 << 10, "MiB/s": 1 << 20, "GiB/s": 1 << 30,
	"bit/s": 1.0 / 8, "kbit/s": 1e3 / 8, "Mbit/s": 1e6 / 8, "Gbit/s": 1e9 / 8,
}

// tcUnits are tc's spellings of bit rates, in any case.
var tcUnits = map[string]float64{"bit": 1.0 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}

// RateBytes reads a number and a rate unit ("10MB/s", "512KiB/s",
// "80Mbit/s"; the "/s" may be left out of bit rates, as tc does:
// "80mbit") as bytes per second, without judging the value. ok is false
// when s has no unit.
func RateBytes(s string) (b float64, ok bool, err error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return !(r >= '0' && r <= '9' || r == '.' || r == '-' || r == '+') })
	if i < 0 {
		return 0, false, nil
	}
	if i == 0 {
		return 0, true, fmt.Errorf("rate %q: want a number and a unit, like 10MB/s, 512KiB/s or 80Mbit/s", s)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, true, fmt.Errorf("rate %q: %q is not a number", s, t[:i])
	}
	unit := strings.TrimSpace(t[i:])
	mult, known := rateUnits[unit]
	if !known {
		mult, known = tcUnits[strings.ToLower(strings.TrimSuffix(unit, "/s"))]
	}
	if !known {
		return 0, true, fmt.Errorf("rate %q: unknown unit %q: use B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s or kbit/s, Mbit/s, Gbit/s", s, unit)
	}
	return v * mult, true, nil
}
