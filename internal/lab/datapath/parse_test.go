package datapath

import (
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    CPUTimes
		wantErr bool
	}{
		{"cpu  10 2 30 400 5 6 7 8 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n", CPUTimes{Busy: 10 + 2 + 30 + 6 + 7, IRQ: 13}, false},
		{"cpu 1 0 0 0 0 0 0\n", CPUTimes{Busy: 1}, false},
		{"cpu0 1 2 3 4 5 6 7 8\n", CPUTimes{}, true}, // not the all-CPU line
		{"cpu 1 2 3\n", CPUTimes{}, true},
		{"cpu 1 x 3 4 5 6 7 8\n", CPUTimes{}, true},
		{"", CPUTimes{}, true},
	} {
		got, err := ParseStat(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseStat(%q) = %+v, %v; want %+v, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"1234 (sanqos) S 1 1234 1234 0 -1 4194560 100 0 0 0 17 25 0 0 20 0 9 0 100 0 0", 42, false},
		// A command with spaces and a ')' of its own.
		{"7 (a b) c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 0 0", 7, false},
		{"7 (x) R 1 2 3", 0, true},
		{"no command here", 0, true},
		{"7 (x) R 1 7 7 0 -1 0 0 0 0 0 u 4 0 0", 0, true},
	} {
		got, err := ParseProcStat(c.in)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseProcStat(%q) = %d, %v; want %d, error %v", c.in, got, err, c.want, c.wantErr)
		}
	}
}

func TestParseStats(t *testing.T) {
	out := "10.0.0.2 delay 1ms write\npackets held 6083, passed 12, backlog 0, bypassed 3, errors 0, delay error p50 12µs max 1.2ms\n"
	got, err := ParseStats(out)
	want := Stats{Held: 6083, Passed: 12, Bypassed: 3, ErrP50: "12µs", ErrMax: "1.2ms"}
	if err != nil || got != want {
		t.Errorf("ParseStats = %+v, %v; want %+v", got, err, want)
	}
	// edt's: fq's average lateness, and drops.
	got, err = ParseStats("packets held 900, passed 0, backlog 4, bypassed 0, errors 0, delay error p50 0s max 0s avg 79.069µs, DROPPED 2\n")
	if want := (Stats{Held: 900, ErrP50: "0s", ErrMax: "0s", ErrAvg: "79.069µs"}); err != nil || got != want {
		t.Errorf("ParseStats of edt's line = %+v, %v; want %+v", got, err, want)
	}
	if _, err := ParseStats("no throttles\n"); err == nil {
		t.Error("ParseStats of a list without counters: no error")
	}
}

// TestParseDrops: the drop counters of fq, htb and the NFQUEUE as their
// kernel files print them.
func TestParseDrops(t *testing.T) {
	const fq = `qdisc fq 5e: root refcnt 2 limit 10000p flow_limit 100p buckets 1024 orphan_mask 1023 quantum 3028b initial_quantum 15140b low_rate_threshold 550Kbit refill_delay 40ms timer_slack 10us horizon 10s horizon_drop
 Sent 9035644 bytes 6083 pkt (dropped 17, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
qdisc clsact ffff: parent ffff:fff1
 Sent 9035644 bytes 6083 pkt (dropped 3, overlimits 0 requeues 0)
`
	const htb = `qdisc htb 1: root refcnt 2 r2q 10 default 0x2 direct_packets_stat 0 direct_qlen 1000
 Sent 1000 bytes 10 pkt (dropped 5, overlimits 2 requeues 0)
 backlog 0b 0p requeues 0
qdisc fq_codel 8001: parent 1:2 limit 10240p flows 1024
 Sent 500 bytes 5 pkt (dropped 9, overlimits 0 requeues 0)
`
	for _, c := range []struct {
		backend, out string
		want         uint64
	}{
		{"edt", fq, 17},
		{"edt", "qdisc noqueue 0: root refcnt 2\n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)\n", 0},
		{"htb", htb, 5},
		{"htb", fq, 0},
		{"nfqueue", " 3260  3402     0 2 65531     4     2    40562  1\n 3261  3403     0 2 65531     1     0       10  1\n", 7},
		{"nfqueue", "", 0},
	} {
		if got := ParseDrops(c.backend, c.out); got != c.want {
			t.Errorf("ParseDrops(%s, %q) = %d, want %d", c.backend, c.out, got, c.want)
		}
	}
}

func TestQuantile(t *testing.T) {
	xs := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		xs   []time.Duration
		q    float64
		want time.Duration
	}{
		{xs, 0.5, 5}, {xs, 0.99, 10}, {xs, 0, 1}, {xs, 1, 10}, {xs, 0.1, 1}, {xs, 0.9, 9},
		{nil, 0.5, 0}, {[]time.Duration{7}, 0.99, 7},
	} {
		if got := Quantile(c.xs, c.q); got != c.want {
			t.Errorf("Quantile(%v, %v) = %v, want %v", c.xs, c.q, got, c.want)
		}
	}
}

func TestHoldErrors(t *testing.T) {
	got := HoldErrors([]time.Duration{1300, 1100, 1200}, 100, 1000)
	want := []time.Duration{0, 100, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("HoldErrors = %v, want %v (sorted)", got, want)
		}
	}
}

func TestRatioWithin(t *testing.T) {
	for _, c := range []struct {
		r    Ratio
		want bool
	}{
		{Ratio{Median: 1, Lo: 0.995, Hi: 1.004}, true},
		{Ratio{Median: 1, Lo: 0.989, Hi: 1.004}, false},
		{Ratio{Median: 1, Lo: 0.995, Hi: 1.011}, false},
	} {
		if got := c.r.Within(0.01); got != c.want {
			t.Errorf("%+v.Within(1%%) = %v, want %v", c.r, got, c.want)
		}
	}
}
