package loadspec

import (
	"fmt"
	"strconv"
	"strings"
)

// Binary size units. Like fio (kb_base=1024), k, m and g in sizes and rates
// are powers of 1024, so the thesis's rate=256k is 262144 bytes/s.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// ParseSize parses a byte count such as "4096", "8k", "64KiB", "2g" or
// "128MB". Every suffix is a power of 1024, as in fio.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	num := strings.TrimRightFunc(t, func(r rune) bool { return r >= 'a' && r <= 'z' })
	unit := t[len(num):]
	mult := int64(1)
	switch unit {
	case "", "b":
	case "k", "kb", "kib":
		mult = KiB
	case "m", "mb", "mib":
		mult = MiB
	case "g", "gb", "gib":
		mult = GiB
	case "t", "tb", "tib":
		mult = TiB
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (use k, m, g or t)", s, unit)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a whole non-negative number with an optional unit, e.g. 64k", s)
	}
	if n > 0 && mult > 1 && n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize renders n with the largest binary unit that divides it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		m int64
		s string
	}{{TiB, "t"}, {GiB, "g"}, {MiB, "m"}, {KiB, "k"}} {
		if n != 0 && n%u.m == 0 {
			return strconv.FormatInt(n/u.m, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}
