package experiments

import (
	"fmt"
	"time"
)

// The workloads the law was never tuned on (issue 33): continuous small
// random writers, writers that keep many I/Os outstanding on each
// connection, NFS writers that flush every few MiB, and large writers on
// a volume behind IOPS and throughput caps. Each is run uncontrolled,
// under a sweep of fixed write delays (manual throttles on an observing
// daemon, as in frontier) and under pid (at 15 ms; capped at 3 ms), so that
// the controller is judged against the best static throttle for the same
// workload: smalljob's p95 ≤ UntunedP95Factor × T, seconds over 1.2 × T
// ≤ UntunedOverPct, and the writers' MB/s ≥ UntunedMinShare % of the
// smallest fixed delay's that meets T.
const (
	UntunedP95Factor = 1.1
	UntunedOverPct   = 2.0
	UntunedMinShare  = 90.0
	untunedThreshold = 15
)

// untunedNames are the experiments untunedChecks judge.
var untunedNames = map[string]bool{"steadyw": true, "deepq": true, "nfsfsync": true, "nfsfsync-wb": true, "capped": true}

// nfsWritebackBytes is nfsfsync-wb's dirty page limit on the export's
// device: well under one client's 4 MiB between two COMMITs, so the
// server writes the data out as it arrives.
const nfsWritebackBytes = 1 << 20

// untunedWorkload is an experiment's writer load: n threads of job, with
// depth I/Os outstanding and a flush every fsync writes; continuous
// unless on (bytes per thread per burst) is given.
type untunedWorkload struct {
	job          string
	n            int
	depth, fsync int
	on           string
	delays       []float64 // the fixed-delay sweep, ms
	thresholdMs  float64   // pid's; 0 is untunedThreshold
}

// plan returns the runs: uncontrolled, the fixed delays and pid.
func (u untunedWorkload) plan(short bool) []plannedRun {
	total := runLength(short, 90*time.Second)
	w := interference(total)
	w.Writers, w.WriterJob, w.WriterDepth, w.WriterFsync = u.n, u.job, u.depth, u.fsync
	w.On, w.Off = u.on, 0
	if u.on != "" {
		w.Off = burstOff
	}
	out := []plannedRun{{"none", w, Control{Controller: "none"}}}
	for _, d := range u.delays {
		c := Control{Controller: "none", FixedDelayMs: d}
		out = append(out, plannedRun{c.label(), w, c})
	}
	pid := Control{Controller: "pid", ThresholdMs: untunedThreshold}
	if u.thresholdMs > 0 {
		pid.ThresholdMs = u.thresholdMs
	}
	return append(out, plannedRun{pid.label(), w, pid})
}

// untunedExperiments are issue 33's workloads beyond the suite.
func untunedExperiments() []Experiment {
	steady := untunedWorkload{job: "randwrite-4k", n: 12, delays: []float64{25, 50, 100, 200}}
	deep := untunedWorkload{job: "randwrite-16k", n: 3, depth: 32, delays: []float64{50, 100, 200, 400}}
	// 64 writes of 64 KiB: a flush every 4 MiB.
	fsync := untunedWorkload{job: "seqwrite-64k", n: 12, fsync: 64, on: burstBytes, delays: []float64{10, 20, 40, 80}}
	judgedAt := func(ms float64) string {
		return fmt.Sprintf("uncontrolled, under fixed write delays and sanqos pid at %g ms; pid is judged against the smallest "+
			"fixed delay that meets %g ms (p95 ≤ %g × T, ≤ %g %% of seconds over 1.2 × T, writers ≥ %g %% of its MB/s).",
			ms, ms, UntunedP95Factor, UntunedOverPct, UntunedMinShare)
	}
	judged := judgedAt(untunedThreshold)
	// Three 1 MiB writers at iodepth 4 just fit under the volume's caps
	// at a fixed 20 ms (the simulator's matrix cell); T = 3 ms lies
	// between the reader's wait with tokens in the bucket and without.
	capped := untunedWorkload{job: "seqwrite-1m", n: 3, depth: 4, delays: []float64{10, 20, 30, 45}, thresholdMs: cappedThreshold}
	return []Experiment{
		{
			Name:  "steadyw",
			Title: "Continuous small random writers: 12 threads of 4 KiB random writes that never pause (issue 33)",
			Describe: "smalljob on b2; 12 random 4 KiB writer threads (4 per initiator on b3-b5, randwrite-4k) writing " +
				"without pause for the whole run; " + judged,
			refMs: untunedThreshold, plan: steady.plan, plots: plotFrontier, analyze: analyzeUntuned,
		},
		{
			Name:  "deepq",
			Title: "VM-like writers: random 16 KiB writes at iodepth 32 on each of three initiators (issue 33)",
			Describe: "smalljob on b2; one random 16 KiB writer thread on each of b3-b5 keeping 32 writes outstanding on its " +
				"connection (randwrite-16k --iodepth 32, libiscsi's asynchronous calls), without pause; " + judged,
			refMs: untunedThreshold, plan: deep.plan, plots: plotFrontier, analyze: analyzeUntuned,
		},
		{
			Name:  "nfsfsync",
			Title: "NFS writers that flush every 4 MiB: fig5.11's writers with UNSTABLE writes and a COMMIT every 64 (issue 33)",
			Describe: "the nfs experiment's load on one nfs-ganesha export (smalljob on b2, 12 sequential 64 KiB writer threads " +
				"on b3-b5, 32 MiB per thread per burst, 5 s pause), the writers' WRITEs UNSTABLE with a COMMIT after every " +
				"64 (--fsync 64, every 4 MiB); " + judged,
			refMs: untunedThreshold, nfs: true, plan: fsync.plan, plots: plotFrontier, analyze: analyzeUntuned,
		},
		{
			Name:  "nfsfsync-wb",
			Title: "nfsfsync with the server writing out as data arrives: the export's dirty cache capped at 1 MiB (issue 33)",
			Describe: "nfsfsync's load and runs, with the export device's dirty page cache limited to 1 MiB " +
				"(its BDI's max_bytes with strict_limit, as an administrator would set it), so that a COMMIT finds " +
				"little to write; " + judged,
			refMs: untunedThreshold, nfs: true, nfsDirtyBytes: nfsWritebackBytes, plan: fsync.plan, plots: plotFrontier,
			analyze: analyzeUntuned,
		},
		{
			Name:  "capped",
			Title: "A volume behind IOPS and throughput caps: three 1 MiB writers at iodepth 4 on the cloud-3000 profile (issue 33)",
			Describe: "on the cloud-3000 profile (3000 IOPS and 125 MB/s, token buckets a tenth of a second deep: the " +
				"reader waits 0.8 ms while the buckets have tokens and many times that once the writers empty them); " +
				"smalljob on b2; one sequential 1 MiB writer thread on each of b3-b5 keeping 4 writes outstanding " +
				"(seqwrite-1m --iodepth 4), without pause; " + judgedAt(cappedThreshold),
			refMs: cappedThreshold, profile: "cloud-3000", plan: capped.plan, plots: plotFrontier, analyze: analyzeUntuned,
		},
	}
}

// cappedThreshold is the capped experiment's promise, ms.
const cappedThreshold = 3

// analyzeUntuned finds the best static throttle, judged by issue 33's
// share.
func analyzeUntuned(s *Summary) {
	s.Frontier = frontierOf(s.Runs)
	s.Frontier.MinSharePct = UntunedMinShare
}

// untunedChecks are issue 33's targets for the controller's run: its p95
// and seconds over 1.2 × T (the share is frontierChecks').
func untunedChecks(s *Summary) []Check {
	if !untunedNames[s.Experiment] {
		return nil
	}
	var out []Check
	for _, r := range s.Runs {
		if r.ThresholdMs == nil {
			continue
		}
		th := *r.ThresholdMs
		lim := UntunedP95Factor * th
		out = append(out,
			Check{r.Name, "p95 wait", fmt.Sprintf("≤ %.4g ms", lim), fmt.Sprintf("%.1f ms", r.WaitMs.P95), r.WaitMs.P95 <= lim},
			Check{r.Name, fmt.Sprintf("seconds above %.4g ms", OverFactor*th), fmt.Sprintf("≤ %g %%", UntunedOverPct),
				fmt.Sprintf("%.1f %%", r.OverThresholdPct), r.OverThresholdPct <= UntunedOverPct},
			Check{r.Name, "TCP retransmissions (initiators)", "0", fmt.Sprint(r.Retransmits), r.Retransmits == 0},
		)
	}
	return out
}
