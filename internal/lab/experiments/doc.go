// Package experiments runs the thesis's lab experiments (§5.1, §5.5, §5.7,
// §5.9; Fig. 5.1, 5.7, 5.9-5.13) on the lab of package lab and turns their
// logs into numbers, plots and a report.
//
// An experiment is a set of runs of one workload: load generators
// (cmd/sanqos-iscsiload) in the initiator namespaces, started at one common
// instant with --start-at so their per-second logs line up, and, for the
// controlled runs, the sanqos daemon inside the target namespace
// (`ip netns exec sanqos-bm sanqos run … --record FILE`) on the nfqueue
// backend. Every run writes its raw JSON-lines logs to a directory of its
// own; the analysis (analysis.go) is pure and works from those logs alone,
// so it is tested with logs captured from real runs in testdata/.
//
// What is measured, and over which window, is fixed here once for every
// experiment and the report:
//
//   - the reader's wait is the load generator's per-second mean latency of
//     smalljob's reads, as the initiator sees it (not the target's
//     r_await), over the seconds in which the writers are active (their
//     aggregate write rate is over ActiveMBs);
//   - retransmissions are TCP retransmitted segments (TcpRetransSegs,
//     counted by nstat) in every initiator namespace and in the target's,
//     read before and after a run;
//   - "released" is the time from the writers stopping (the daemon's own
//     per-tick write rates drop to nothing) until the record shows delay 0
//     and an empty throttleable set;
//   - a burst is a stretch of seconds with the writers active, pauses
//     under 2 s included; its settle time runs from its onset until
//     smalljob's wait is back under 1.2 × threshold and stays there to
//     the burst's end (burst.go, at the 1 s resolution of the waits);
//   - the source reports' guarantees (guarantees.go) — Jain's index per
//     burst, the longest wait of a writer thread, nothing lost, the
//     pacing's CV within each second, never worse than no control — are
//     Checks of every run, beside the thesis's targets.
//
// Beyond the thesis: randw and surge24 saturate the disk harder (24
// random 8 KiB or 24 sequential writer threads), guarantees runs the
// workloads where throttling cannot help, and frontier sweeps fixed
// write delays to price the controller against the best static throttle
// (frontier.go).
package experiments
