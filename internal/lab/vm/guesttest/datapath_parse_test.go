package guesttest

import "testing"

// TestDatapathParseDrops runs on the host too: the drop counters of fq
// and of the NFQUEUE as their kernel files print them.
func TestDatapathParseDrops(t *testing.T) {
	for _, c := range []struct {
		backend, out string
		want         uint64
	}{
		{"edt", `qdisc fq 5e: root refcnt 2 limit 10000p flow_limit 100p buckets 1024 orphan_mask 1023 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit refill_delay 40ms timer_slack 10us horizon 10s horizon_drop
 Sent 9035644 bytes 6083 pkt (dropped 17, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc clsact ffff: parent ffff:fff1
 Sent 9035644 bytes 6083 pkt (dropped 3, overlimits 0 requeues 0)
`, 17},
		{"edt", "qdisc noqueue 0: root refcnt 2\n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)\n", 0},
		{"nfqueue", " 3260  3402     0 2 65531     4     2    40562  1\n 3261  3403     0 2 65531     1     0       10  1\n", 7},
		{"nfqueue", "", 0},
	} {
		if got := parseDrops(c.backend, c.out); got != c.want {
			t.Errorf("parseDrops(%s, %q) = %d, want %d", c.backend, c.out, got, c.want)
		}
	}
}
