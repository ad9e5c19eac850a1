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
		flat.Samples = append(flat.Samples, SoakSample{At: at, RSSKiB: 30000 + int64(i%3)*100, Threads: 12, FDs: 20, Objects: 8})
		grow.Samples = append(grow.Samples, SoakSample{At: at, RSSKiB: 30000 + int64(i)*200, Threads: 12, FDs: 20 + int64(i/10), Objects: 8})
	}
	Judge(flat)
	if len(flat.Failures) != 0 {
		t.Errorf("flat run failed: %q", flat.Failures)
	}
	Judge(grow)
	f := strings.Join(grow.Failures, "\n")
	if !strings.Contains(f, "RSS") || !strings.Contains(f, "descriptors") || strings.Contains(f, "threads") {
		t.Errorf("growing run: failures %q, want RSS and descriptors only", f)
	}
	left := &SoakReport{Samples: flat.Samples, Leftovers: []string{"ipset sanqos-x"}}
	Judge(left)
	if !strings.Contains(strings.Join(left.Failures, "\n"), "left behind: ipset sanqos-x") {
		t.Errorf("leftovers not failed: %q", left.Failures)
	}
}
