package experiments

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab/datapath"
	"github.com/sanqos/sanqos/internal/lab/plot"
)

// DatapathResult is the datapath experiment's result in summary.json.
type DatapathResult struct {
	Kernel   string   `json:"kernel"`
	Backends []string `json:"backends"`
	Skipped  []Skip   `json:"skipped,omitempty"`
	// IdleArm is each idle arm's time per workload.
	IdleArm time.Duration `json:"idle_arm"`
	Idle    []IdleRow     `json:"idle"`
	Hold    []HoldRow     `json:"hold"`
	Bulk    []BulkRow     `json:"bulk"`
	// Problems are what the cost measurement found wrong beyond noise.
	Problems []string `json:"problems,omitempty"`

	idle []datapath.Idle
	cost *datapath.Cost
}

// Skip is a backend this kernel cannot run, and why.
type Skip struct {
	Backend string `json:"backend"`
	Why     string `json:"why"`
}

// IdleRow is one backend's idle overhead on one workload.
type IdleRow struct {
	Backend  string  `json:"backend"`
	Workload string  `json:"workload"`
	Pairs    int     `json:"pairs"`
	Ratio    float64 `json:"ratio"`
	Lo       float64 `json:"ci99_lo"`
	Hi       float64 `json:"ci99_hi"`
	Within1  bool    `json:"within_1pct"`
}

// HoldRow is one backend's hold error at one delay.
type HoldRow struct {
	Backend string  `json:"backend"`
	HoldMs  float64 `json:"hold_ms"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
	MaxUs   float64 `json:"max_us"`
}

// BulkRow is one backend's bulk flows: CPU (ours) is this process's
// sockets, the daemon and the machine's irq and softirq time; busy is
// every CPU's.
type BulkRow struct {
	Backend        string  `json:"backend"`
	Packets        uint64  `json:"packets"`
	MBs            float64 `json:"mb_s"`
	PktsPerCore    float64 `json:"pkts_per_core"`
	NsPerPkt       float64 `json:"ns_cpu_per_pkt"`
	BusyPerCore    float64 `json:"pkts_per_core_busy"`
	BusyNsPerPkt   float64 `json:"ns_busy_per_pkt"`
	DaemonNsPerPkt float64 `json:"daemon_ns_per_pkt"`
	Retrans        uint64  `json:"retransmits"`
	Drops          uint64  `json:"drops"`
}

// fill sums the raw measurements up into the rows.
func (d *DatapathResult) fill() {
	for _, r := range d.idle {
		for _, w := range []struct {
			name string
			r    datapath.Ratio
		}{{"bulk upload", r.BulkRatio()}, {"4 KiB round trips", r.RRRatio()}} {
			d.Idle = append(d.Idle, IdleRow{Backend: r.Backend, Workload: w.name, Pairs: w.r.N, Ratio: w.r.Median, Lo: w.r.Lo, Hi: w.r.Hi, Within1: w.r.Within(0.01)})
		}
	}
	c := d.cost
	for _, b := range d.Backends {
		holds := c.Config.Holds
		if b == "none" {
			holds = []time.Duration{0}
		}
		for _, h := range holds {
			if e := c.Errors(b, h); len(e) > 0 && !datapath.RateOnly(b) {
				us := func(x time.Duration) float64 { return float64(x) / 1e3 }
				d.Hold = append(d.Hold, HoldRow{Backend: b, HoldMs: float64(h) / 1e6, P50Us: us(datapath.Quantile(e, 0.5)),
					P99Us: us(datapath.Quantile(e, 0.99)), MaxUs: us(e[len(e)-1])})
			}
		}
		t := c.Totals(b)
		d.Bulk = append(d.Bulk, BulkRow{Backend: b, Packets: t.Pkts, MBs: float64(t.Bytes) / t.Wall.Seconds() / 1e6,
			PktsPerCore: t.PerCore(), NsPerPkt: t.NsPerPkt(), BusyPerCore: t.BusyPerCore(), BusyNsPerPkt: t.BusyNsPerPkt(),
			DaemonNsPerPkt: t.DaemonNsPerPkt(), Retrans: t.Retrans, Drops: t.Drops})
	}
	d.Problems = c.Problems
}

// datapathChecks are issue 35's idle criterion per backend and workload
// (the 99 % interval of running/stopped within ±1 %), and that the cost
// measurement found nothing wrong.
func datapathChecks(d *DatapathResult) []Check {
	var out []Check
	for _, r := range d.Idle {
		out = append(out, Check{Run: r.Backend, What: "idle overhead, " + r.Workload, Want: "99 % interval of running/stopped within 0.99–1.01",
			Got: fmt.Sprintf("median %.4f, interval %.4f–%.4f over %d pairs", r.Ratio, r.Lo, r.Hi, r.Pairs), OK: r.Within1})
	}
	got := "none"
	if len(d.Problems) > 0 {
		got = strings.Join(d.Problems, "; ")
	}
	return append(out, Check{Run: "all", What: "every packet of the held flows delayed, none early, no retransmitted ping-pong",
		Want: "no problem", Got: got, OK: len(d.Problems) == 0})
}

// datapathMarkdown is report.md.
func datapathMarkdown(s *Summary) string {
	d := s.Datapath
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n%s\n\nKernel %s; %s to %s", s.Title, s.Describe, d.Kernel, s.Started.Format(time.RFC3339), s.Finished.Format(time.RFC3339))
	if s.Short {
		b.WriteString(" (--short)")
	}
	fmt.Fprintf(&b, ". Backends measured: %s.\n\n", strings.Join(d.Backends, ", "))
	for _, sk := range d.Skipped {
		fmt.Fprintf(&b, "* %s skipped: %s\n", sk.Backend, sk.Why)
	}
	b.WriteString("\n## Idle overhead\n\n")
	datapath.IdleTable(&b, d.idle, d.IdleArm)
	b.WriteString("\n## Hold error\n\n")
	d.cost.HoldTable(&b)
	b.WriteString("\n## Cost per delayed packet\n\n")
	d.cost.BulkTable(&b)
	if slices.Contains(d.Backends, "edt") {
		b.WriteString("\n## The kernel path's criteria\n\n")
		d.cost.Criteria(&b)
	}
	b.WriteString("\n## Criteria as measured\n\n")
	for _, c := range s.Checks {
		mark := "met"
		if !c.OK {
			mark = "**missed**"
		}
		fmt.Fprintf(&b, "* %s — %s (%s): want %s; got %s\n", mark, c.What, c.Run, c.Want, c.Got)
	}
	b.WriteString("\n## Plots\n\n")
	for _, p := range s.Plots {
		fmt.Fprintf(&b, "![%s](%s)\n\n", p, p)
	}
	b.WriteString("On the first plot each point is one bulk arm: packets/s per core is 10⁶ over the CPU µs per packet, so the points " +
		"lie on one curve; where a backend sits on it, and how far its arms spread, is what it shows.\n")
	return b.String()
}

// plotDatapath draws datapath.png (one point per bulk arm: packets/s per
// core against CPU per delayed packet) and holdcdf.png.
func plotDatapath(dir string, d *DatapathResult) ([]string, error) {
	var pts []plot.Series
	for _, b := range d.Backends {
		s := plot.Series{Name: b}
		for _, a := range d.cost.Bulk[b] {
			pkts := a.Held
			if b == "none" || datapath.RateOnly(b) {
				pkts = uint64(a.Segs)
			}
			if pkts == 0 || a.CPU.Ours <= 0 {
				continue
			}
			s.X = append(s.X, float64(a.CPU.Ours)/float64(pkts)/1e3)
			s.Y = append(s.Y, float64(pkts)/a.CPU.Ours.Seconds()/1e3)
		}
		pts = append(pts, s)
	}
	if err := plot.Stacked(filepath.Join(dir, "datapath.png"), "datapath: packets/s per core against CPU per delayed packet, per bulk arm",
		"µs CPU per delayed packet (this process's sockets, the daemon, irq and softirq)",
		[]plot.Panel{{Title: "one point per arm", YLabel: "k packets/s per core", Points: pts}}); err != nil {
		return nil, err
	}
	panels := holdCDFPanels(d)
	if len(panels) == 0 {
		return []string{"datapath.png"}, nil
	}
	if err := plot.Stacked(filepath.Join(dir, "holdcdf.png"), "datapath: hold error CDF per backend (tail beyond 2 × the largest p99 cut)",
		"hold error µs (round trip − median without sanqos − delay)", panels); err != nil {
		return nil, err
	}
	return []string{"datapath.png", "holdcdf.png"}, nil
}

func holdCDFPanels(d *DatapathResult) []plot.Panel {
	c := d.cost
	var panels []plot.Panel
	for _, h := range c.Config.Holds {
		var cut time.Duration
		for _, b := range d.Backends {
			if b != "none" {
				cut = max(cut, 2*datapath.Quantile(c.Errors(b, h), 0.99))
			}
		}
		p := plot.Panel{Title: fmt.Sprintf("held %v (none: unheld, about its median)", h), YLabel: "fraction of exchanges"}
		for _, b := range d.Backends {
			e := c.Errors(b, h)
			if datapath.RateOnly(b) || len(e) == 0 {
				continue
			}
			s := plot.Series{Name: b}
			for i, x := range e {
				if x > cut {
					break
				}
				s.X = append(s.X, float64(x)/1e3)
				s.Y = append(s.Y, float64(i+1)/float64(len(e)))
			}
			p.Series = append(p.Series, s)
		}
		if len(p.Series) > 1 {
			panels = append(panels, p)
		}
	}
	return panels
}
