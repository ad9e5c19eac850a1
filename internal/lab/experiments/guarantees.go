package experiments

import (
	"fmt"
	"math"
	"sort"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// The source reports' guarantees (issue 12, item 5), each with its limit
// and why.
const (
	// MinJain: per burst, Jain's index over the writer threads' MB/s.
	// 0.9 is the issue's; 12 equal threads of which one gets half the
	// others' rate score 0.96, one starved completely 0.92.
	MinJain = 0.9
	// MaxStallMs: no writer thread waits longer than this for one I/O
	// (or between two completions): the Linux report's writers stalled
	// 15-26 s; an application survives a second.
	MaxStallMs = 1000
	// CVFactor: the writers' throughput in 100 ms bins while throttled may
	// vary by at most this × the uncontrolled run's coefficient of
	// variation (scaled for the rate, see cvLimit). A delay paced per
	// packet must not make the writers burstier than the disk alone
	// does; 1.5 leaves room for the VM's scheduling stalls, which hold a
	// whole 100 ms bin's packets at once.
	CVFactor = 1.5
	// MinCVLimit is the CV a paced run may always show: bins within about
	// a quarter of their mean are paced; the bursts the NFS report warns
	// of (all of a second's data in one or two bins) give a CV of 1 and
	// more. Without it the limit followed the disk alone, whose streams
	// are so even (CV 0.03-0.04 on fig5.11) that a controlled run at 0.11
	// (12 threads each waiting one delayed R2T per I/O) "missed".
	MinCVLimit = 0.25
	// NoiseRel and NoiseAbsMs are what "within noise" means for the
	// reader's p95 wait and throughput of two runs of the same workload:
	// repeated uncontrolled fig5.11 runs in one session differ by a few
	// %, controlled 15 ms runs over sessions by up to 9 % (16.8-18.3 ms),
	// so 10 %; and 1-second means of a few-ms wait move by about a
	// millisecond with the VM's steal alone, so 1 ms more.
	NoiseRel   = 0.10
	NoiseAbsMs = 1.0
	// MaxFastWriterLoss: on a disk where delay buys the reader nothing
	// (guarantees-ssd), the writers' MB/s with sanqos may fall short of
	// uncontrolled by at most this share (issue 33): what the loop's
	// probes and its verdict's first seconds cost them.
	MaxFastWriterLoss = 0.05
	// minCVSeconds: fewer steady throttled seconds than this are too few
	// to judge the pacing by (a writer the controller holds only now and
	// then); the CV is reported, not checked.
	minCVSeconds = 5
)

// Guarantees are the measurements the guarantee checks judge, per run.
type Guarantees struct {
	// BurstJain is Jain's index over the writer threads' MB/s in each
	// burst (in the order of Bursts); MinJain is the lowest. A thread's
	// MB/s is from its burst lines (its share over its own time on),
	// or, for writers without an on/off schedule or older logs, its
	// bytes over the burst's seconds.
	BurstJain []float64 `json:"burst_jain,omitempty"`
	MinJain   float64   `json:"min_jain"`
	// MaxWriteIOMs is the longest single write; MaxWriteGapMs the longest
	// wait of any writer thread from one completion to the next (0 in
	// logs from before the load generator recorded it).
	MaxWriteIOMs  float64 `json:"max_write_io_ms"`
	MaxWriteGapMs float64 `json:"max_write_gap_ms"`
	// RTOs is TcpExtTCPTimeouts, Undetected the retransmitted segments
	// no receiver reported as duplicates (DSACK), over the initiators:
	// both 0 means nothing was lost.
	RTOs       int64 `json:"rtos"`
	Undetected int64 `json:"retransmits_not_dsacked"`
	// WriteCV is the coefficient of variation of the writers' aggregate
	// throughput over the 100 ms bins of a second (root mean square over
	// CVSeconds steady seconds: inside a burst, not its first or last
	// second, and in a controlled run throttled through the whole
	// second), at CVMBs on average. -1: no such second or no bins in the
	// logs.
	WriteCV   float64 `json:"write_cv_100ms"`
	CVSeconds int     `json:"cv_seconds"`
	CVMBs     float64 `json:"cv_mb_s"`
	// ReaderP95Ms and ReaderMBs are the reader side for "never worse":
	// smalljob's p95 wait and kB/s/1000, or with several readers
	// (fig5.1's load) the p95 of every reader's 1-second mean latency
	// and their aggregate MB/s.
	ReaderP95Ms float64 `json:"reader_p95_ms"`
	ReaderMBs   float64 `json:"reader_mb_s"`
}

// steadySeconds marks the seconds whose 100 ms bins the CV is taken
// over: active, with active neighbours (not a burst's first or last
// second) and, when ticks are given (a controlled run), every tick of
// the second throttling.
func steadySeconds(tl Timeline, ticks []Tick, controlled bool) []bool {
	out := make([]bool, len(tl.T))
	for i := 1; i+1 < len(tl.T); i++ {
		out[i] = tl.Active[i-1] && tl.Active[i] && tl.Active[i+1]
	}
	if !controlled {
		return out
	}
	all := make([]bool, len(tl.T))
	seen := make([]int, len(tl.T))
	for i := range all {
		all[i] = true
	}
	for _, t := range ticks {
		k := int(math.Ceil(t.T)) - 1 // tick at t belongs to the second ending at ceil(t)
		if k < 0 || k >= len(all) {
			continue
		}
		seen[k]++
		if !t.Throttling() {
			all[k] = false
		}
	}
	for i := range out {
		// At 100 ms ticks a second has 10; 5 is enough to judge it.
		out[i] = out[i] && all[i] && seen[i] >= 5
	}
	return out
}

// binCV is how unevenly the writers move data within a second: in each
// marked second (full seconds only), the coefficient of variation of
// their aggregate bytes over its ten 100 ms bins; over the seconds, its
// root mean square. Taking it within each second leaves out the slow
// changes of the rate a controller makes on purpose and keeps the
// unevenness of the pacing. It returns the CV, the seconds it covers and
// the writers' mean MB/s over them; CV -1 when there is no such second.
func binCV(tl Timeline, mark []bool) (cv float64, n int, mbs float64) {
	var sq, bytes float64
	for i, ok := range mark {
		if !ok || i >= len(tl.WriteBins) || len(tl.WriteBins[i]) != 10 {
			continue
		}
		xs := make([]float64, 10)
		for k, b := range tl.WriteBins[i] {
			xs[k] = float64(b)
		}
		m := iolog.Mean(xs)
		if m == 0 {
			continue
		}
		var v float64
		for _, x := range xs {
			v += (x - m) * (x - m)
		}
		sq += v / 10 / (m * m)
		bytes += 10 * m
		n++
	}
	if n == 0 {
		return -1, 0, 0
	}
	return iolog.Round3(math.Sqrt(sq / float64(n))), n, iolog.Round3(bytes / float64(n) / 1e6)
}

// cvLimit is the largest CV a throttled run may show against its
// uncontrolled run's: CVFactor × that CV, scaled for the rate, and never
// under MinCVLimit. A bin of
// fewer I/Os varies more by chance alone (as 1/sqrt of its I/Os), so a
// run at a quarter of the rate may show twice the CV with the same
// pacing.
func cvLimit(base, baseMBs, mbs float64) float64 {
	if mbs <= 0 || baseMBs <= 0 {
		return max(CVFactor*base, MinCVLimit)
	}
	return max(CVFactor*base*math.Sqrt(max(baseMBs/mbs, 1)), MinCVLimit)
}

// lossOf is what the TCP counters say of a run: retransmission timeouts
// and retransmitted segments not reported back as duplicates, over the
// initiators (the target's namespace left out, as Retransmits does).
func lossOf(r *RunResult) (rtos, undetected int64) {
	for ns, n := range r.RetransmitsBy {
		if ns == lab.TargetNS {
			continue
		}
		rtos += r.RTOsBy[ns]
		undetected += max(0, n-r.DSACKsBy[ns])
	}
	return rtos, undetected
}

// fastGroup is the workload of guarantees-ssd: a disk where delay buys
// the reader nothing, judged by "never slower" and the writers' loss.
const fastGroup = "fast-ssd"

// fastChecks judge a controlled run of fastGroup against its
// uncontrolled run b: the reader no slower (mean and p95 of its 1-second
// waits, within NoiseRel), the writers within MaxFastWriterLoss.
func fastChecks(r, b *RunResult) []Check {
	meanLim, p95Lim := b.WaitMs.Mean*(1+NoiseRel), b.WaitMs.P95*(1+NoiseRel)
	wLim := b.WriteMBs * (1 - MaxFastWriterLoss)
	return []Check{
		{r.Name, "never slower: reader mean and p95 wait",
			fmt.Sprintf("≤ uncontrolled %.2f and %.2f ms + %g %% = %.2f and %.2f ms", b.WaitMs.Mean, b.WaitMs.P95, 100*NoiseRel, meanLim, p95Lim),
			fmt.Sprintf("%.2f and %.2f ms", r.WaitMs.Mean, r.WaitMs.P95), r.WaitMs.Mean <= meanLim && r.WaitMs.P95 <= p95Lim},
		{r.Name, "writers lose under 5 %",
			fmt.Sprintf("≥ uncontrolled %.1f MB/s − %g %% = %.1f", b.WriteMBs, 100*MaxFastWriterLoss, wLim),
			fmt.Sprintf("%.1f MB/s", r.WriteMBs), r.WriteMBs >= wLim},
	}
}

// guaranteeChecks judges every run that carries Guarantees; a controlled
// run is compared with the uncontrolled run of its group (or of the
// experiment, when runs have no group).
func guaranteeChecks(s *Summary) []Check {
	var out []Check
	base := func(r *RunResult) *RunResult {
		for _, o := range s.Runs {
			if o.ThresholdMs == nil && o.Group == r.Group && o.Guarantees != nil && o.FixedDelayMs == 0 {
				return o
			}
		}
		return nil
	}
	for _, r := range s.Runs {
		g := r.Guarantees
		if g == nil {
			continue
		}
		// A fixed delay throttles too: it must lose nothing either. The
		// guarantees are about the throttled: an uncontrolled run is
		// their reference, shown beside each check, not judged (the
		// disk's own unfairness among unthrottled writers is not
		// sanqos's to answer for).
		if r.ThresholdMs == nil && r.FixedDelayMs == 0 {
			continue
		}
		b := base(r)
		// Tenants' terms (shares, reservations, caps) make the writers'
		// rates unequal on purpose; their checks judge the split instead.
		if len(g.BurstJain) > 0 && r.Tenants == nil {
			got := fmt.Sprintf("min %.3f over %d bursts", g.MinJain, len(g.BurstJain))
			if b != nil && len(b.Guarantees.BurstJain) > 0 {
				got += fmt.Sprintf(" (uncontrolled: min %.3f)", b.Guarantees.MinJain)
			}
			out = append(out, Check{r.Name, "Jain's index over the writers, every burst", fmt.Sprintf("≥ %g", MinJain),
				got, g.MinJain >= MinJain})
		}
		if r.Writers > 0 {
			stall := max(g.MaxWriteIOMs, g.MaxWriteGapMs)
			got := fmt.Sprintf("%.0f ms (longest I/O %.0f, longest gap %.0f)", stall, g.MaxWriteIOMs, g.MaxWriteGapMs)
			if b != nil {
				got += fmt.Sprintf(" (uncontrolled: %.0f ms)", max(b.Guarantees.MaxWriteIOMs, b.Guarantees.MaxWriteGapMs))
			}
			out = append(out, Check{r.Name, "longest wait of a writer thread for one I/O", fmt.Sprintf("≤ %g ms", float64(MaxStallMs)),
				got, stall <= MaxStallMs})
		}
		ref := "no uncontrolled run to compare"
		if b != nil {
			ref = fmt.Sprintf("uncontrolled: %d segments, %d RTOs, %d not DSACKed", b.Retransmits, b.Guarantees.RTOs, b.Guarantees.Undetected)
		}
		out = append(out, Check{r.Name, "nothing lost: no RTO, every retransmission a DSACKed probe", "0 RTOs, 0 not DSACKed",
			fmt.Sprintf("%d segments, %d RTOs, %d not DSACKed (%s)", r.Retransmits, g.RTOs, g.Undetected, ref), g.RTOs == 0 && g.Undetected == 0})
		if b != nil && g.WriteCV >= 0 && g.CVSeconds >= minCVSeconds && b.Guarantees.WriteCV > 0 {
			bg := b.Guarantees
			lim := cvLimit(bg.WriteCV, bg.CVMBs, g.CVMBs)
			out = append(out, Check{r.Name, "writers' 100 ms throughput CV while throttled",
				fmt.Sprintf("≤ max(%g × uncontrolled's %.2f × √(%.1f/%.1f MB/s), %g) = %.2f", CVFactor, bg.WriteCV, bg.CVMBs, g.CVMBs, MinCVLimit, lim),
				fmt.Sprintf("%.2f over %d s", g.WriteCV, g.CVSeconds), g.WriteCV <= lim})
		}
		if r.Group == fastGroup && b != nil {
			out = append(out, fastChecks(r, b)...)
		}
		if r.Group != "" && b != nil {
			// Never worse than no control, on the workloads where
			// throttling writers cannot help.
			lim := b.Guarantees.ReaderP95Ms*(1+NoiseRel) + NoiseAbsMs
			out = append(out, Check{r.Name, "never worse: reader p95 wait", fmt.Sprintf("≤ uncontrolled %.1f ms + %g %% + %g ms = %.1f ms", b.Guarantees.ReaderP95Ms, 100*NoiseRel, NoiseAbsMs, lim),
				fmt.Sprintf("%.1f ms", g.ReaderP95Ms), g.ReaderP95Ms <= lim})
			tlim := b.Guarantees.ReaderMBs * (1 - NoiseRel)
			out = append(out, Check{r.Name, "never worse: reader throughput", fmt.Sprintf("≥ uncontrolled %.3f MB/s − %g %% = %.3f", b.Guarantees.ReaderMBs, 100*NoiseRel, tlim),
				fmt.Sprintf("%.3f MB/s", g.ReaderMBs), g.ReaderMBs >= tlim})
		}
	}
	return out
}

// readersWait is the p95 over every reader's 1-second mean latencies, in
// the seconds ending in (from, to], and their aggregate MB/s over it.
func readersWait(readers map[string][]iolog.Record, from, to float64) (p95, mbs float64) {
	var lat []float64
	hosts := make([]string, 0, len(readers))
	for h := range readers {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		var bytes int64
		for _, r := range iolog.Select(readers[h], iolog.KindInterval, 0, iolog.OpRead) {
			k := float64(secondOf(r.T, 0))
			if k <= from || k > to {
				continue
			}
			bytes += r.Bytes
			if r.IOs > 0 {
				lat = append(lat, r.Lat.Mean)
			}
		}
		mbs += float64(bytes) / (to - from) / 1e6
	}
	return iolog.Round3(iolog.Percentile(lat, 95)), iolog.Round3(mbs)
}
