package sim

import (
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// The scenario matrix (issue 33, "Generality, by construction"): disks
// × writers × thresholds, each cell run under the controller, without
// it, and at the static delays of a grid, so that the controller is
// judged against the best fixed throttle for that cell (Violations).

// Writers is one writer workload of the matrix.
type Writers struct {
	Random  bool
	Bytes   int64 // per I/O
	Threads int   // in all, spread over the three writer hosts
	IODepth int   // per connection (thread)
	Bursty  bool  // on/off bursts of about BurstSeconds, else steady
}

func (w Writers) String() string {
	pat := "seq"
	if w.Random {
		pat = "rand"
	}
	mode := "steady"
	if w.Bursty {
		mode = "bursty"
	}
	return fmt.Sprintf("%s-%s-%dthr-qd%d-%s", pat, sizeName(w.Bytes), w.Threads, max(w.IODepth, 1), mode)
}

func sizeName(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dm", n>>20)
	}
	return fmt.Sprintf("%dk", n>>10)
}

// Cell is one point of the matrix.
type Cell struct {
	Disk        string
	Writers     Writers
	ThresholdMs float64
}

// MatrixScenario is the scenario of a cell: the thesis's reader (8 KiB
// random reads at 256 KiB/s) on its own host, and the writers on three
// hosts. Assumptions beyond the calibrated scenarios: a write's network
// time is 0.3 ms plus its bytes at gigabit speed; a throttled write pays
// 1.2 delays when it fits in one PDU's immediate data (8 KiB or less, as
// RandWScenario), 1.85 up to one burst of 256 KiB (the calibrated sync
// writer) and one more per further 256 KiB burst (each waits for a
// delayed R2T); bursts last about burst of writing at the uncontrolled
// rate (burstBytes per thread, from a steady run), 5 s apart.
func MatrixScenario(c Cell, burstBytes int64) (Scenario, error) {
	disk, err := diskmodel.ProfileByName(c.Disk)
	if err != nil {
		return Scenario{}, err
	}
	w := c.Writers
	if w.Threads < 3 || w.Bytes <= 0 {
		return Scenario{}, fmt.Errorf("writers %v: want at least 3 threads and a size", w)
	}
	ip := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	sc := Scenario{
		Name: c.Disk + "/" + w.String(),
		Disk: disk,
		Devices: []Device{
			{Name: "dm-0", Addr: ip("10.0.0.242"), Reader: true},
			{Name: "dm-1", Addr: ip("10.0.0.243"), Threads: (w.Threads + 2) / 3},
			{Name: "dm-2", Addr: ip("10.0.0.244"), Threads: (w.Threads + 1) / 3},
			{Name: "dm-3", Addr: ip("10.0.0.245"), Threads: w.Threads / 3},
		},
		LUNBytes: 8 << 30, LUNStride: 8 << 30,
		WriteBytes: w.Bytes, BurstBytes: 1 << 50, Pause: 5 * time.Second,
		ReadBytes: 8 << 10, ReaderBps: 256 << 10,
		Start:      10 * time.Second,
		WriteNetMs: 0.3 + float64(w.Bytes)/125e3, ReadNetMs: 0.15, ResponseNetMs: 0.1,
		RandomWrites:  w.Random,
		WriteIODepth:  w.IODepth,
		PerHostBursts: true,
	}
	switch {
	case w.Bytes <= 8<<10:
		sc.WriteDelayFactor = 1.2
	case w.Bytes <= 256<<10:
		sc.WriteDelayFactor = 1.85
	default:
		sc.WriteDelayFactor = 1.85 + float64((w.Bytes-1)/(256<<10))
	}
	if w.Bursty && burstBytes > 0 {
		sc.BurstBytes = max(burstBytes-burstBytes%w.Bytes, w.Bytes)
	}
	return sc, nil
}

// CellResult is what the matrix reports for a cell.
type CellResult struct {
	Cell
	// Uncontrolled, static (the best static delay) and controlled runs.
	None, Static, PID Summary
	// StaticMs is the best static delay: the smallest of the grid whose
	// p95 meets T, or 0 (none) when none does.
	StaticMs  float64
	StaticMet bool
	// Controlled run: p95/T, seconds over 1.2 × T (%), the longest run
	// of consecutive seconds over 1.2 × T, and the writers' rate as a
	// share of the best static delay's.
	P95OverT, OverPct, LongestOverS, Share float64
}

// StaticGridMs are the fixed delays the best static delay is sought
// among.
var StaticGridMs = []float64{0.5, 1, 2, 5, 10, 20, 50, 100, 200}

// MatrixOptions set a matrix run.
type MatrixOptions struct {
	Duration     time.Duration // of each run (default 60 s)
	Seed         int64         // default 1
	BurstSeconds float64       // a bursty cell's burst at the uncontrolled rate (default 10)
	// ColdCache starts every run with the array's write-back cache
	// empty. Otherwise a cache that destages in the background
	// (raid6-hdd's 1 GiB) starts full, as the cell's uncontrolled
	// writers, which outrun its destage, leave it in production
	// (Scenario.WarmCacheBytes); a run starting empty is judged on how
	// long the cache takes to fill, not on the array's steady state.
	// The small caches of the other profiles fill in the first second.
	ColdCache bool
}

// scenario is the cell's scenario with the cache these options start it
// with.
func (o MatrixOptions) scenario(c Cell, burst int64) (Scenario, error) {
	sc, err := MatrixScenario(c, burst)
	if err == nil && !o.ColdCache && sc.Disk.DestageDepth > 0 {
		sc.WarmCacheBytes = sc.Disk.CacheBytes
	}
	return sc, err
}

// RunCell runs one cell: uncontrolled, at each static delay of the grid
// (until one meets T), and under the pid controller.
func RunCell(c Cell, o MatrixOptions) (CellResult, error) {
	if o.Duration <= 0 {
		o.Duration = 60 * time.Second
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.BurstSeconds <= 0 {
		o.BurstSeconds = 10
	}
	res := CellResult{Cell: c}
	run := func(sc Scenario, ctl string, fixed float64) (*Result, error) {
		cfg := DefaultConfig()
		cfg.Scenario, cfg.Controller, cfg.ThresholdMs = sc, ctl, c.ThresholdMs
		cfg.Duration, cfg.Seed, cfg.FixedDelayMs = o.Duration, o.Seed, fixed
		return Run(cfg)
	}
	var burst int64
	if c.Writers.Bursty {
		// The burst size from the uncontrolled steady rate.
		steady, err := o.scenario(c, 0)
		if err != nil {
			return res, err
		}
		r, err := run(steady, "none", 0)
		if err != nil {
			return res, err
		}
		burst = int64(r.Summary.WriteMBs * 1e6 * o.BurstSeconds / float64(c.Writers.Threads))
	}
	sc, err := o.scenario(c, burst)
	if err != nil {
		return res, err
	}
	none, err := run(sc, "none", 0)
	if err != nil {
		return res, err
	}
	res.None, res.Static = none.Summary, none.Summary
	if none.Summary.ReadLatencyMs.P95 > c.ThresholdMs {
		for _, d := range StaticGridMs {
			r, err := run(sc, "none", d)
			if err != nil {
				return res, err
			}
			if r.Summary.ReadLatencyMs.P95 <= c.ThresholdMs {
				res.Static, res.StaticMs, res.StaticMet = r.Summary, d, true
				break
			}
		}
	} else {
		res.StaticMet = true
	}
	pid, err := run(sc, "pid", 0)
	if err != nil {
		return res, err
	}
	res.PID = pid.Summary
	res.P95OverT = pid.Summary.ReadLatencyMs.P95 / c.ThresholdMs
	res.OverPct = pid.Summary.OverThresholdPct
	var run1 float64
	for _, s := range pid.Seconds {
		if s.WritersOn && !math.IsNaN(s.ReadMs) && s.ReadMs > 1.2*c.ThresholdMs {
			run1++
			res.LongestOverS = max(res.LongestOverS, run1)
		} else {
			run1 = 0
		}
	}
	if res.Static.WriteMBs > 0 {
		res.Share = pid.Summary.WriteMBs / res.Static.WriteMBs
	}
	return res, nil
}

// The guarantees of a cell (issue 33). Where some static delay of the
// grid (or none) meets T, the controller must too, as well as the best
// of them does: its p95 within GuaranteeP95 × T, no run of seconds over
// 1.2 × T longer than GuaranteeBurstS, and the writers at GuaranteeShare
// of the best static delay's rate at least. Where none meets T, it must
// never be worse than no control: the reader's p95 no higher than
// uncontrolled.
const (
	GuaranteeP95    = 1.2
	GuaranteeBurstS = 2
	GuaranteeShare  = 0.9
)

// Violations lists the guarantees the cell's controlled run broke.
func (r CellResult) Violations() []string {
	var v []string
	if !r.StaticMet {
		if p, n := r.PID.ReadLatencyMs.P95, r.None.ReadLatencyMs.P95; p > n {
			v = append(v, fmt.Sprintf("p95 %.2f ms worse than none's %.2f (no static delay meets T)", p, n))
		}
		return v
	}
	if r.P95OverT > GuaranteeP95 {
		v = append(v, fmt.Sprintf("p95 %.2f × T > %g", r.P95OverT, GuaranteeP95))
	}
	if r.LongestOverS > GuaranteeBurstS {
		v = append(v, fmt.Sprintf("%g s in a row over 1.2 × T > %d", r.LongestOverS, GuaranteeBurstS))
	}
	if r.Share < GuaranteeShare {
		v = append(v, fmt.Sprintf("writers at %.2f of the best static delay's rate < %g", r.Share, GuaranteeShare))
	}
	return v
}

// MatrixHeader and Row print a matrix as a fixed-width table.
func MatrixHeader(w io.Writer) {
	fmt.Fprintf(w, "%-11s %-32s %7s | %8s %8s | %8s %6s | %7s %6s %7s %6s %7s\n",
		"disk", "writers", "T ms", "none p95", "MB/s", "static", "MB/s", "p95/T", "over%", "burst s", "share", "pid MB/s")
	fmt.Fprintln(w, strings.Repeat("-", 132))
}

// Row prints one cell's line: the uncontrolled p95 and rate, the best
// static delay ("-" when none meets T) and its rate, and the controlled
// run's p95/T, seconds over 1.2 × T, longest burst over it, and the
// writers' share of the static rate.
func (r CellResult) Row(w io.Writer) {
	static := "-"
	if r.StaticMet {
		static = fmt.Sprintf("%g", r.StaticMs)
	}
	fmt.Fprintf(w, "%-11s %-32s %7g | %8.2f %8.2f | %8s %6.2f | %7.2f %6.1f %7.0f %6.2f %7.2f\n",
		r.Disk, r.Writers, r.ThresholdMs, r.None.ReadLatencyMs.P95, r.None.WriteMBs, static, r.Static.WriteMBs,
		r.P95OverT, r.OverPct, r.LongestOverS, r.Share, r.PID.WriteMBs)
}

// MatrixTally sums a matrix's controlled runs, to compare two laws over
// several seeds where one seed's cells move both ways.
type MatrixTally struct {
	Runs, Violating int
	// Met counts the runs where a static delay (or none) meets T, over
	// which the p95/T and the seconds over 1.2 × T are averaged: where
	// none does, the p95 is many times T and would swamp the mean.
	Met               int
	p95OverT, overPct float64
	logShare          float64
	shared            int
}

// Add counts one cell's result.
func (m *MatrixTally) Add(r CellResult) {
	m.Runs++
	if len(r.Violations()) > 0 {
		m.Violating++
	}
	if r.StaticMet {
		m.Met++
		m.p95OverT += r.P95OverT
		m.overPct += r.OverPct
	}
	if r.Share > 0 {
		m.logShare += math.Log(r.Share)
		m.shared++
	}
}

// MeanP95OverT and MeanOverPct are over the runs where T can be met;
// GeoShare is the geometric mean of the writers' share of the best
// static delay's rate (of uncontrolled where none meets T) over all.
func (m MatrixTally) MeanP95OverT() float64 { return m.p95OverT / float64(max(m.Met, 1)) }
func (m MatrixTally) MeanOverPct() float64  { return m.overPct / float64(max(m.Met, 1)) }
func (m MatrixTally) GeoShare() float64 {
	if m.shared == 0 {
		return 0
	}
	return math.Exp(m.logShare / float64(m.shared))
}

func (m MatrixTally) String() string {
	return fmt.Sprintf("%d runs, %d break a guarantee; where T can be met (%d): p95 %.3f × T, %.2f %% of seconds over 1.2 × T; writers at %.3f of the best static delay's rate (geometric mean)",
		m.Runs, m.Violating, m.Met, m.MeanP95OverT(), m.MeanOverPct(), m.GeoShare())
}
