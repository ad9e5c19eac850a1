package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
)

// labSoak is 'sanqos lab soak': the fig5.11 workload against one daemon
// for --duration while its RSS, threads, goroutines, descriptors and kernel objects
// are sampled; it fails on growth or leftovers.
func labSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab soak", "sanqos lab soak [--duration 1h] [--out DIR]",
		`Bring up a fresh lab, run the fig5.11 workload (smalljob on b2, 12
sequential 64 KiB writers on b3-b5 in 32 MiB bursts with 5 s pauses)
against one sanqos daemon (pid at 15 ms, tgt discovery, nfqueue) for
--duration, and sample the daemon every --interval: RSS, threads, goroutines (from its metrics), open
descriptors, and the kernel objects it owns in the target namespace
(SANQOS rules, sanqos-* ipsets). After a minute of warm-up, a
least-squares line through each must not grow over the run by more than
2 (threads, descriptors, objects) or max(4 MiB, 10 %) (RSS), and nothing
may be left in the kernel once the daemon stopped. The samples are in
DIR/soak.tsv. The lab is taken down at the end, also on Ctrl-C.`, stderr)
	duration := fs.Duration("duration", time.Hour, "how long the workload runs")
	interval := fs.Duration("interval", 10*time.Second, "time between samples")
	out := fs.String("out", "soak", "directory of the daemon's config, log and record, the load logs and soak.tsv")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *duration < 2*time.Minute {
		return usageError(fs, "--duration %v: want at least 2m (the first minute is warm-up)", *duration)
	}
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root")
	}
	daemon, err := lab.FindDaemon()
	if err != nil {
		return err
	}
	opts, err := labOptions(lab.DefaultStorage.Profile, "", "2GiB", 1, stdout)
	if err != nil {
		return err
	}
	l, err := lab.Up(ctx, opts)
	if err != nil {
		return err
	}
	rep, soakErr := l.Soak(ctx, lab.SoakOptions{Duration: *duration, Interval: *interval, Sanqos: daemon, Out: *out, Progress: stdout})
	if err := l.Down(); err != nil {
		soakErr = errors.Join(soakErr, fmt.Errorf("taking the lab down: %w", err))
	}
	if soakErr != nil {
		return soakErr
	}
	fmt.Fprintf(stdout, "soak %v, %d samples, judged over %v after warm-up:\n", *duration, len(rep.Samples), rep.Span.Round(time.Second))
	fmt.Fprintf(stdout, "  RSS %+.0f KiB/h, threads %+.2f/h, goroutines %+.2f/h, descriptors %+.2f/h, kernel objects %+.2f/h\n",
		rep.RSSKiBPerHour, rep.ThreadsPerHour, rep.GoroutinesPerHour, rep.FDsPerHour, rep.ObjectsPerHour)
	if len(rep.Failures) > 0 {
		return fmt.Errorf("soak failed:\n  %s", strings.Join(rep.Failures, "\n  "))
	}
	fmt.Fprintln(stdout, "soak passed: nothing grew, nothing was left behind")
	return nil
}
