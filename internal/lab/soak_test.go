package lab

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3}
	if s := Slope(xs, []float64{5, 7, 9, 11}); math.Abs(s-2) > 1e-9 {
		t.Errorf("slope %v, want 2", s)
	}
	if s := Slope([]float64{1, 1}, []float64{3, 4}); s != 0 {
		t.Errorf("slope over no span %v, want 0", s)
	}
}

func TestJudge(t *testing.T) {
	flat := &SoakReport{}
	grow := &SoakReport{}
	for i := range 60 {
		at := time.Duration(i) * time.Minute
		flat.Samples = append(flat.Samples, SoakSample{At: at, RSSKiB: 30000 + int64(i%3)*100, Threads: 12, Goroutines: 40 + int64(i%5), FDs: 20, Objects: 8})
		grow.Samples = append(grow.Samples, SoakSample{At: at, RSSKiB: 30000 + int64(i)*200, Threads: 12, Goroutines: 40 + int64(i), FDs: 20 + int64(i/10), Objects: 8})
	}
	Judge(flat)
	if len(flat.Failures) != 0 {
		t.Errorf("flat run failed: %q", flat.Failures)
	}
	Judge(grow)
	f := strings.Join(grow.Failures, "\n")
	if !strings.Contains(f, "RSS") || !strings.Contains(f, "descriptors") || !strings.Contains(f, "goroutines") || strings.Contains(f, "threads") {
		t.Errorf("growing run: failures %q, want RSS, goroutines and descriptors only", f)
	}
	unread := &SoakReport{Samples: append([]SoakSample(nil), flat.Samples...)}
	unread.Samples[30].Goroutines = -1
	Judge(unread)
	if !strings.Contains(strings.Join(unread.Failures, "\n"), "could not be read in 1 samples") {
		t.Errorf("unreadable metrics not failed: %q", unread.Failures)
	}
	// A step of two threads in the middle of the span (13 -> 15, as the
	// runtime makes them for blocking calls) is not a leak; three more,
	// or threads that keep coming, are.
	for _, c := range []struct {
		threads func(i int) int64
		fail    bool
	}{
		{func(i int) int64 { return 13 + 2*int64(min(i/30, 1)) }, false},
		{func(i int) int64 { return 13 + 3*int64(min(i/30, 1)) }, true},
		{func(i int) int64 { return 13 + int64(i/10) }, true},
	} {
		r := &SoakReport{Samples: append([]SoakSample(nil), flat.Samples...)}
		for i := range r.Samples {
			r.Samples[i].Threads = c.threads(i)
		}
		Judge(r)
		if got := strings.Contains(strings.Join(r.Failures, "\n"), "threads"); got != c.fail {
			t.Errorf("threads %d ... %d: failed %v, want %v (%q)", c.threads(0), c.threads(59), got, c.fail, r.Failures)
		}
	}
	left := &SoakReport{Samples: flat.Samples, Leftovers: []string{"ipset sanqos-x"}}
	Judge(left)
	if !strings.Contains(strings.Join(left.Failures, "\n"), "left behind: ipset sanqos-x") {
		t.Errorf("leftovers not failed: %q", left.Failures)
	}
}

func TestMetricValue(t *testing.T) {
	expo := "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 37\ngo_threads 9\nsanqos_delay_ms{resource=\"a\"} 3\n"
	for name, want := range map[string]int64{"go_goroutines": 37, "go_threads": 9, "sanqos_delay_ms": -1, "absent": -1} {
		if got := metricValue(expo, name); got != want {
			t.Errorf("metricValue(%s) = %d, want %d", name, got, want)
		}
	}
}
