//go:build linux

package edt

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestParseFqStats: fq's statistics as the kernel lays out struct
// tc_fq_qdisc_stats: 104 bytes since Linux 5.7 (the horizon's fields),
// 80 before, longer since 6.7; shorter is not fq's.
func TestParseFqStats(t *testing.T) {
	stats := func(n int) []byte {
		b := make([]byte, max(n, 104))
		le := binary.NativeEndian
		le.PutUint64(b[0:], 11)     // gc_flows
		le.PutUint64(b[24:], 5)     // throttled
		le.PutUint64(b[32:], 3)     // flows_plimit
		le.PutUint32(b[64:], 9)     // flows
		le.PutUint32(b[76:], 42000) // unthrottle_latency_ns
		le.PutUint64(b[88:], 1)     // horizon_drops
		le.PutUint64(b[96:], 2)     // horizon_caps
		return b[:n]
	}
	for _, c := range []struct {
		name string
		b    []byte
		want fqStats
		ok   bool
	}{
		{"6.1", stats(104), fqStats{throttled: 5, flowsPlimit: 3, horizonCaps: 2, late: 42 * time.Microsecond}, true},
		{"6.7 and later", stats(200), fqStats{throttled: 5, flowsPlimit: 3, horizonCaps: 2, late: 42 * time.Microsecond}, true},
		{"before the horizon", stats(80), fqStats{throttled: 5, flowsPlimit: 3, late: 42 * time.Microsecond}, true},
		{"too short", stats(64), fqStats{}, false},
	} {
		got, ok := parseFqStats(c.b)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
