// Package plot draws the time-series figures of sanqos reports (the
// simulator's and the lab's): panels stacked vertically over one shared X
// axis, like thesis Fig. 5.13 (read latency with its threshold, throttle
// delay, write rate). It is a thin layer over gonum.org/v1/plot that fixes
// the look (size, colours, legends) so every report figure reads the same.
package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	gplot "gonum.org/v1/plot"
	gfont "gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line. NaN in Y leaves a gap (no sample there).
type Series struct {
	Name string
	X, Y []float64
	// YErr, when set, draws an error bar of ± YErr[i] at each point (a
	// standard error, say).
	YErr []float64
}

// HLine is a horizontal reference line, such as a threshold.
type HLine struct {
	Y     float64
	Label string
}

// Panel is one plot of the stack.
type Panel struct {
	Title, YLabel string
	Series        []Series
	// Points are drawn as markers only (a few runs on a frontier), in
	// the colours after the lines'.
	Points []Series
	HLines []HLine
	// Spans shade windows of X behind the lines: when a throttle was in
	// force, say.
	Spans []Span
}

// Span is a shaded window [From, To] of X; Color picks the palette
// colour (that of the series it concerns), drawn light.
type Span struct {
	From, To float64
	Label    string
	Color    int
}

// Size of the PNG: readable on a screen and in a report at 100 %.
const (
	widthPx, heightPx = 1200, 900
	dpi               = 96
)

// palette: distinct, colour-blind-friendly (Okabe–Ito), in series order.
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255},   // blue
	color.RGBA{213, 94, 0, 255},    // vermillion
	color.RGBA{0, 158, 115, 255},   // bluish green
	color.RGBA{204, 121, 167, 255}, // reddish purple
	color.RGBA{230, 159, 0, 255},   // orange
	color.RGBA{86, 180, 233, 255},  // sky blue
	color.RGBA{0, 0, 0, 255},       // black
	color.RGBA{240, 228, 66, 255},  // yellow
}

// Color returns the colour of the i-th series, for callers that draw
// something matching.
func Color(i int) color.Color { return palette[i%len(palette)] }

// Stacked writes a PNG to path with the panels stacked top to bottom over
// one X range; only the bottom panel carries the X label.
func Stacked(path, title, xlabel string, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("plot: no panels to draw")
	}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, p := range panels {
		for _, s := range append(append([]Series(nil), p.Series...), p.Points...) {
			if len(s.X) != len(s.Y) {
				return fmt.Errorf("plot: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
			}
			for _, x := range s.X {
				if !math.IsNaN(x) && !math.IsInf(x, 0) {
					xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
				}
			}
		}
	}
	rows := make([][]*gplot.Plot, len(panels))
	for i, pn := range panels {
		p, err := panel(pn, i == len(panels)-1, xlabel)
		if err != nil {
			return fmt.Errorf("plot: panel %q: %w", pn.Title, err)
		}
		if xmin < xmax {
			p.X.Min, p.X.Max = xmin, xmax
		}
		rows[i] = []*gplot.Plot{p}
	}

	w := vg.Length(widthPx) * vg.Inch / dpi
	h := vg.Length(heightPx) * vg.Inch / dpi
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	titleH := vg.Points(0)
	if title != "" {
		titleH = vg.Points(28)
		sty := draw.TextStyle{
			Color: color.Black, Font: titleFont(), XAlign: draw.XCenter, YAlign: draw.YTop,
			Handler: gplot.DefaultTextHandler,
		}
		dc.FillText(sty, vg.Point{X: w / 2, Y: h - vg.Points(6)}, title)
	}
	tiles := draw.Tiles{
		Rows: len(panels), Cols: 1,
		PadX: vg.Points(4), PadY: vg.Points(10),
		PadTop: titleH + vg.Points(4), PadBottom: vg.Points(6),
		PadLeft: vg.Points(6), PadRight: vg.Points(12),
	}
	canvases := gplot.Align(rows, tiles, dc)
	for i := range rows {
		rows[i][0].Draw(canvases[i][0])
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("plot: creating the directory of %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	return nil
}

func titleFont() gfont.Font {
	f := gplot.DefaultFont
	f.Size = vg.Points(16)
	return f
}

func panel(pn Panel, bottom bool, xlabel string) (*gplot.Plot, error) {
	p := gplot.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = pn.YLabel
	p.Y.Label.TextStyle.Font.Size = vg.Points(12)
	p.Y.Tick.Label.Font.Size = vg.Points(11)
	p.X.Tick.Label.Font.Size = vg.Points(11)
	if bottom {
		p.X.Label.Text = xlabel
		p.X.Label.TextStyle.Font.Size = vg.Points(12)
	}
	p.X.Tick.Marker = niceTicks{}
	p.Y.Tick.Marker = niceTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	p.Y.Min = 0
	for _, sp := range pn.Spans {
		sh := shade{Span: sp}
		p.Add(sh)
		if sp.Label != "" {
			p.Legend.Add(sp.Label, sh)
		}
	}

	ymax, err := addErrorBars(p, pn)
	if err != nil {
		return nil, err
	}
	for i, s := range pn.Series {
		col := Color(i)
		first := true
		for _, seg := range segments(s.X, s.Y) {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return nil, fmt.Errorf("series %q: %w", s.Name, err)
			}
			l.Color = col
			l.Width = vg.Points(1.6)
			p.Add(l)
			if first && s.Name != "" {
				p.Legend.Add(s.Name, l)
				first = false
			}
			for _, pt := range seg {
				ymax = math.Max(ymax, pt.Y)
			}
		}
	}
	for i, s := range pn.Points {
		for _, seg := range segments(s.X, s.Y) {
			sc, err := plotter.NewScatter(seg)
			if err != nil {
				return nil, fmt.Errorf("points %q: %w", s.Name, err)
			}
			sc.GlyphStyle.Color = Color(len(pn.Series) + i)
			sc.GlyphStyle.Radius = vg.Points(5)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			p.Add(sc)
			if s.Name != "" {
				p.Legend.Add(s.Name, sc)
			}
			for _, pt := range seg {
				ymax = math.Max(ymax, pt.Y)
			}
		}
	}
	ymax = math.Max(ymax, addHLines(p, pn.HLines))
	// Headroom above the highest point so the legend does not cover data.
	if ymax > 0 {
		p.Y.Max = ymax * 1.35
	} else {
		p.Y.Max = 1
	}
	return p, nil
}

// addHLines draws the reference lines, dashed, and returns the highest.
func addHLines(p *gplot.Plot, hls []HLine) float64 {
	ymax := 0.0
	for i, hl := range hls {
		y := hl.Y
		f := plotter.NewFunction(func(float64) float64 { return y })
		f.Color = color.RGBA{60, 60, 60, 255}
		f.Width = vg.Points(1.4)
		f.Dashes = []vg.Length{vg.Points(6), vg.Points(4 + float64(i)*2)}
		p.Add(f)
		if hl.Label != "" {
			p.Legend.Add(hl.Label, f)
		}
		ymax = math.Max(ymax, hl.Y)
	}
	return ymax
}

// addErrorBars draws the error bars of every series and points of pn,
// in their colours, and returns the highest bar's top.
func addErrorBars(p *gplot.Plot, pn Panel) (float64, error) {
	ymax := 0.0
	for i, s := range append(append([]Series(nil), pn.Series...), pn.Points...) {
		if len(s.YErr) == 0 {
			continue
		}
		if len(s.YErr) != len(s.Y) {
			return 0, fmt.Errorf("series %q has %d y values and %d errors", s.Name, len(s.Y), len(s.YErr))
		}
		eb, err := plotter.NewYErrorBars(errorBars{xy(s), s.YErr})
		if err != nil {
			return 0, fmt.Errorf("series %q: %w", s.Name, err)
		}
		eb.Color = Color(i)
		eb.LineStyle.Width = vg.Points(1.4)
		p.Add(eb)
		for k := range s.Y {
			ymax = math.Max(ymax, s.Y[k]+s.YErr[k])
		}
	}
	return ymax, nil
}

// errorBars is a series with its errors, as gonum's error bars want it.
type errorBars struct {
	plotter.XYs
	err []float64
}

func (e errorBars) YError(i int) (float64, float64) { return e.err[i], e.err[i] }

func xy(s Series) plotter.XYs {
	out := make(plotter.XYs, len(s.X))
	for i := range s.X {
		out[i] = plotter.XY{X: s.X[i], Y: s.Y[i]}
	}
	return out
}

// shade draws a Span over the panel's whole height.
type shade struct{ Span }

func (s shade) color() color.Color {
	r, g, b, _ := Color(s.Color).RGBA()
	return color.NRGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 60}
}

// Plot implements gonum's plot.Plotter.
func (s shade) Plot(c draw.Canvas, p *gplot.Plot) {
	trX, _ := p.Transforms(&c)
	x0, x1 := max(trX(s.From), c.Min.X), min(trX(s.To), c.Max.X)
	if !(x1 > x0) {
		return
	}
	var path vg.Path
	path.Move(vg.Point{X: x0, Y: c.Min.Y})
	path.Line(vg.Point{X: x1, Y: c.Min.Y})
	path.Line(vg.Point{X: x1, Y: c.Max.Y})
	path.Line(vg.Point{X: x0, Y: c.Max.Y})
	path.Close()
	c.SetColor(s.color())
	c.Fill(path)
}

// Thumbnail implements gonum's plot.Thumbnailer, for the legend.
func (s shade) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.color(), []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// segments splits a series at NaN or infinite Y values.
func segments(xs, ys []float64) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for i := range xs {
		x, y := xs[i], ys[i]
		if math.IsNaN(y) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsInf(x, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: x, Y: y})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// niceTicks labels about eight round values (1, 2 or 5 × 10^k apart) with
// no trailing zeros; gonum's default picks few, oddly placed labels for
// time axes.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return gplot.DefaultTicks{}.Ticks(lo, hi)
	}
	raw := (hi - lo) / 8
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []gplot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		r := math.Round(v/step)*step + 0 // + 0 turns -0 into 0: no "-0" label
		ticks = append(ticks, gplot.Tick{Value: r, Label: strconv.FormatFloat(r, 'f', -1, 64)})
		// One unlabelled minor tick halfway.
		if m := r + step/2; m <= hi {
			ticks = append(ticks, gplot.Tick{Value: m})
		}
	}
	return ticks
}
