package plot

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestStackedWritesReadablePNG(t *testing.T) {
	var x, lat, sig, d []float64
	for i := range 600 {
		v := float64(i) / 10
		x = append(x, v)
		lat = append(lat, 15+10*math.Sin(v/5))
		sig = append(sig, 15+8*math.Sin(v/5-0.3))
		d = append(d, math.Max(0, 5*math.Sin(v/5)))
	}
	lat[100] = math.NaN() // a gap must not fail the plot
	path := filepath.Join(t.TempDir(), "sub", "fig.png")
	err := Stacked(path, "sanqos test figure", "time (s)", []Panel{
		{Title: "read latency", YLabel: "ms", Series: []Series{{Name: "1 s mean", X: x, Y: lat}, {Name: "EWMA", X: x, Y: sig}}, HLines: []HLine{{15, "threshold 15 ms"}}},
		{Title: "throttle", YLabel: "delay (ms)", Series: []Series{{Name: "delay", X: x, Y: d}}},
		{Title: "writes", YLabel: "MB/s", Series: []Series{{Name: "aggregate", X: x, Y: d}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w != 1200 || h != 900 {
		t.Errorf("PNG is %dx%d, want 1200x900", w, h)
	}
	// The first two series must be drawn in different colours: count pixels
	// of each palette colour.
	counts := map[int]int{}
	for y := 0; y < 900; y += 1 {
		for x := 0; x < 1200; x += 1 {
			r, g, b, _ := img.At(x, y).RGBA()
			for i := 0; i < 2; i++ {
				pr, pg, pb, _ := Color(i).RGBA()
				if r == pr && g == pg && b == pb {
					counts[i]++
				}
			}
		}
	}
	if counts[0] < 500 || counts[1] < 500 {
		t.Errorf("series colours barely drawn: %v pixels", counts)
	}
	if os.Getenv("SANQOS_PLOT_KEEP") != "" {
		os.WriteFile(os.Getenv("SANQOS_PLOT_KEEP"), b, 0o644)
	}
}

func TestStackedRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := Stacked(filepath.Join(dir, "a.png"), "", "x", nil); err == nil {
		t.Error("no panels accepted")
	}
	err := Stacked(filepath.Join(dir, "b.png"), "", "x", []Panel{{Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}}})
	if err == nil {
		t.Error("series with mismatched lengths accepted")
	}
}

// TestPointsOnly: a panel of markers (a frontier's runs) draws, and a
// malformed point series is refused like a line.
func TestPointsOnly(t *testing.T) {
	dir := t.TempDir()
	err := Stacked(filepath.Join(dir, "p.png"), "frontier", "MB/s", []Panel{{Title: "p95", YLabel: "ms",
		Series: []Series{{Name: "fixed delays", X: []float64{38, 30, 20}, Y: []float64{60, 20, 12}}},
		Points: []Series{{Name: "pid 15 ms", X: []float64{28}, Y: []float64{17}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := Stacked(filepath.Join(dir, "q.png"), "", "x", []Panel{{Points: []Series{{Name: "bad", X: []float64{1, 2}, Y: []float64{1}}}}}); err == nil {
		t.Error("a point series with 2 x and 1 y values drew")
	}
}

// TestNoMinusZeroTick: an axis crossing zero labels it "0".
func TestNoMinusZeroTick(t *testing.T) {
	for _, tk := range (niceTicks{}).Ticks(-4, 14) {
		if tk.Label == "-0" {
			t.Fatalf("ticks %+v have a -0", (niceTicks{}).Ticks(-4, 14))
		}
	}
}

// TestSpansShadeTheirWindow: a span tints the pixels of its X window,
// over the panel's height, and none outside it.
func TestSpansShadeTheirWindow(t *testing.T) {
	x := []float64{0, 100}
	y := []float64{1, 1}
	path := filepath.Join(t.TempDir(), "spans.png")
	if err := Stacked(path, "", "s", []Panel{{Title: "spans", Series: []Series{{Name: "flat", X: x, Y: y}},
		Spans: []Span{{From: 40, To: 60, Label: "b3 throttled", Color: 2}}}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	// Tinted: not white, not grey (grid, text), green above blue and red
	// as the palette's bluish green is.
	tinted := func(px, py int) bool {
		r, g, b, _ := img.At(px, py).RGBA()
		return g > r && g > b && r != g
	}
	row := 500
	var in []int
	for px := 0; px < 1200; px++ {
		if tinted(px, row) {
			in = append(in, px)
		}
	}
	if len(in) < 150 || len(in) > 300 {
		t.Fatalf("%d tinted pixels on row %d, want about a fifth of the plot's width", len(in), row)
	}
	lo, hi := in[0], in[len(in)-1]
	if mid := (lo + hi) / 2; mid < 500 || mid > 700 {
		t.Errorf("tinted window %d..%d is not around the middle of the X axis", lo, hi)
	}
}

func TestErrorBars(t *testing.T) {
	path := filepath.Join(t.TempDir(), "err.png")
	s := Series{Name: "mean", X: []float64{0, 1, 2}, Y: []float64{10, 20, 30}, YErr: []float64{1, 2, 3}}
	if err := Stacked(path, "", "delay (ms)", []Panel{{Title: "t", Points: []Series{s}}}); err != nil {
		t.Fatal(err)
	}
	s.YErr = s.YErr[:2]
	if err := Stacked(path, "", "x", []Panel{{Title: "t", Points: []Series{s}}}); err == nil {
		t.Error("mismatched errors accepted")
	}
}
