package datapath

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/stats"
)

// Us prints a duration in whole microseconds.
func Us(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) }

// HoldTable writes the hold errors per backend and hold as a markdown
// table: each exchange's round trip minus the median round trip without
// sanqos minus the delay.
func (c *Cost) HoldTable(w io.Writer) {
	fmt.Fprintf(w, "Hold error per exchange = round trip − median round trip without sanqos (%s µs) − D; %d exchanges per cell over %d rounds.\n\n",
		Us(c.Base()), c.Config.Pings*c.Config.Rounds, c.Config.Rounds)
	fmt.Fprintln(w, "| backend | D | min RTT µs | p50 µs | p99 µs | max µs |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, b := range c.Config.Backends {
		if RateOnly(b) {
			fmt.Fprintf(w, "| %s | – | – | – | – | – |\n", b)
			continue
		}
		holds := c.Config.Holds
		if b == "none" {
			holds = []time.Duration{0}
		}
		for _, d := range holds {
			e := c.Errors(b, d)
			if len(e) == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %v | %s | %s | %s | %s |\n", b, d, Us(e[0]+c.Base()+d), Us(Quantile(e, 0.5)), Us(Quantile(e, 0.99)), Us(e[len(e)-1]))
		}
	}
	if slices.ContainsFunc(c.Config.Backends, RateOnly) {
		fmt.Fprintln(w, "\nhtb caps rates and ignores delays: it holds no packet for a time, so it has no hold error.")
	}
}

// BulkTable writes the bulk flows' costs per backend as a markdown table.
func (c *Cost) BulkTable(w io.Writer) {
	fmt.Fprintf(w, "Bulk flow target → client for %v per arm, one MSS per packet, every data segment delayed %v (read direction)", c.Config.Bulk, c.Config.ReadDelay)
	if slices.ContainsFunc(c.Config.Backends, RateOnly) {
		fmt.Fprintf(w, "; htb caps it at %s instead", c.Config.RateCap)
	}
	fmt.Fprintln(w, ". CPU (ours) = this process's client and target sockets + the daemon + the machine's irq and softirq time; "+
		"CPU (busy) = every CPU's user+nice+system+irq+softirq from /proc/stat, other work's included.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| backend | arms | packets | MB/s | pkt/s | pkt/s per core (ours) | ns CPU/pkt (ours) | (arms) | ns over none | pkt/s per core (busy) | ns/pkt (busy) | daemon ns/pkt | retrans | bypassed | dropped |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	none := c.Totals("none")
	for _, b := range c.Config.Backends {
		x := c.Totals(b)
		if x.Arms == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.1f | %.0f | %.0f | %.0f | %.0f–%.0f | %+.0f | %.0f | %.0f | %.0f | %d | %d | %d |\n", b, x.Arms, x.Pkts,
			float64(x.Bytes)/x.Wall.Seconds()/1e6, float64(x.Pkts)/x.Wall.Seconds(), x.PerCore(), x.NsPerPkt(), x.NsLo, x.NsHi,
			x.NsPerPkt()-none.NsPerPkt(), x.BusyPerCore(), x.BusyNsPerPkt(), x.DaemonNsPerPkt(), x.Retrans, x.Bypassed, x.Drops)
	}
	if o, ok := c.Own["nfqueue"]; ok {
		fmt.Fprintf(w, "\nnfqueue's own delay error over its last arm (how late it let packets leave): p50 %s max %s.\n", o.ErrP50, o.ErrMax)
	}
	if o, ok := c.Own["edt"]; ok && o.ErrAvg != "" {
		fmt.Fprintf(w, "\nedt's own delay error at the end of its last arm (fq's moving average of how late its timer released a held flow): %s.\n", o.ErrAvg)
	}
}

// Criteria writes issue 35's two kernel-path criteria as measured, when
// both edt and nfqueue ran; the ratios use every CPU's busy time, as in
// the kernel lab's guest, which runs nothing else.
func (c *Cost) Criteria(w io.Writer) {
	if !slices.Contains(c.Config.Backends, "edt") || !slices.Contains(c.Config.Backends, "nfqueue") {
		return
	}
	verdict := func(ok bool) string {
		if ok {
			return "pass"
		}
		return "not met"
	}
	e, n, z := c.Totals("edt"), c.Totals("nfqueue"), c.Totals("none")
	ratio := e.BusyPerCore() / n.BusyPerCore()
	fmt.Fprintf(w, "edt/nfqueue packets/s per core %.2f (edt %.0f, nfqueue %.0f; none %.0f)", ratio, e.BusyPerCore(), n.BusyPerCore(), z.BusyPerCore())
	if oe, on := e.BusyNsPerPkt()-z.BusyNsPerPkt(), n.BusyNsPerPkt()-z.BusyNsPerPkt(); oe > 0 && on > 0 {
		fmt.Fprintf(w, "; on the CPU over none per delayed packet (edt %.0f ns, nfqueue %.0f ns) %.2f", oe, on, on/oe)
	} else {
		fmt.Fprintf(w, "; CPU over none per delayed packet edt %+.0f ns, nfqueue %+.0f ns", oe, on)
	}
	fmt.Fprintf(w, "\n\ncriterion edt ≥ 10× nfqueue packets/s per core: %s (every arm's flow is bounded by the CPU, the baseline's too, so it cannot exceed by much none/nfqueue = %.2f)\n",
		verdict(ratio >= 10), z.BusyPerCore()/n.BusyPerCore())
	worst := time.Duration(0)
	var at []string
	for _, hold := range c.Config.Holds {
		p99 := Quantile(c.Errors("edt", hold), 0.99)
		worst = max(worst, p99)
		at = append(at, fmt.Sprintf("%s µs at %v", Us(p99), hold))
	}
	fmt.Fprintf(w, "\ncriterion edt hold error p99 ≤ 100 µs: %s (%s)\n", verdict(worst <= 100*time.Microsecond), strings.Join(at, ", "))
}

// IdleTable writes the idle measurement as a markdown table, with the
// issue's criterion (the 99 % interval within ±1 %) as measured.
func IdleTable(w io.Writer, rs []Idle, arm time.Duration) {
	if len(rs) == 0 {
		return
	}
	n := len(rs[0].Bulk[0])
	fmt.Fprintf(w, "Idle daemon (knows the client as a consumer, controller none, throttles nobody) running against the same daemon stopped (SIGSTOP), "+
		"%d ABBA pairs per backend, the veth pair with the kernel's default segmentation offload; each arm %v of bulk upload client → target, then %v of %d KiB round trips. Ratio = running/stopped, "+
		"the median over the pairs and its distribution-free 99 %% interval", n, arm, arm, EchoSize>>10)
	if n < stats.MinPairs(0.99) {
		fmt.Fprintf(w, " (with %d pairs, fewer than %d, the interval is the range and holds less than 99 %%)", n, stats.MinPairs(0.99))
	}
	fmt.Fprint(w, ".\n\n")
	fmt.Fprintln(w, "| backend | workload | stopped | running | ratio | 99 % interval | within ±1 % | retransmitted (stopped/running) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---|---|---|")
	for _, r := range rs {
		for _, x := range []struct {
			name, unit string
			div        float64
			v          [2][]float64
			ratio      Ratio
		}{
			{"bulk upload", "GB/s", 1e9, r.Bulk, r.BulkRatio()},
			{"4 KiB round trips", "k/s", 1e3, r.RR, r.RRRatio()},
		} {
			within := "no"
			if x.ratio.Within(0.01) {
				within = "yes"
			}
			re := "–"
			if x.name == "bulk upload" {
				re = fmt.Sprintf("%d/%d", r.Retrans[0], r.Retrans[1])
			}
			fmt.Fprintf(w, "| %s | %s | %.3f %s | %.3f %s | %.4f | %.4f–%.4f | %s | %s |\n", r.Backend, x.name,
				stats.Median(x.v[0])/x.div, x.unit, stats.Median(x.v[1])/x.div, x.unit, x.ratio.Median, x.ratio.Lo, x.ratio.Hi, within, re)
		}
	}
}
