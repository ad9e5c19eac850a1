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
//     and an empty throttleable set.
package experiments
