package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/observe/blkprobe"
)

// cmdProbe prints the eBPF block-latency probe's per-device figures every
// interval: a debugging view of what the daemon's percentile signal sees.
func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("probe", "sanqos probe --dev loop0[,sda…] [--interval 1s] [--count N]",
		`Time every read and write of the named block devices in the kernel (eBPF
on the block tracepoints; a request is timed from the block layer's start
stamp, as /proc/diskstats times it, to its completion) and print per device
and interval: the reads completed, their mean, p50, p95 and p99 latency, the
age of the oldest read still outstanding, and the writes. Devices are named
as in /proc/diskstats. Needs root (CAP_BPF and CAP_PERFMON) and kernel BTF.`, stderr)
	devs := fs.String("dev", "", "comma-separated `devices` as in /proc/diskstats (required)")
	interval := fs.Duration("interval", time.Second, "print period")
	count := fs.Int("count", 0, "stop after this many intervals (0: until Ctrl-C)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *devs == "" {
		return usageError(fs, "--dev is required: name the devices as in /proc/diskstats, e.g. --dev loop0")
	}
	if *interval < 10*time.Millisecond || *count < 0 {
		return usageError(fs, "--interval must be ≥ 10ms and --count ≥ 0")
	}
	p, err := blkprobe.Open(strings.Split(*devs, ","), blkprobe.Options{})
	if err != nil {
		return err
	}
	defer p.Close()
	prev, err := p.Sample(time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-8s %-10s %8s %9s %9s %9s %9s %10s %8s %9s\n",
		"time", "device", "reads", "mean", "p50", "p95", "p99", "oldest", "writes", "w.mean")
	tk := time.NewTicker(*interval)
	defer tk.Stop()
	var missed uint64
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		cur, err := p.Sample(time.Now())
		if err != nil {
			return err
		}
		tick := cur.Sub(prev)
		prev = cur
		for _, name := range p.Devices() {
			d := tick.Devices[name]
			fmt.Fprintf(stdout, "%-8s %-10s %8d %9s %9s %9s %9s %10s %8d %9s\n",
				cur.At.Format("15:04:05"), name, d.Read.Count, us(d.Read.Mean()), us(d.Read.P50()),
				us(d.Read.P95()), us(d.Read.P99()), us(d.OldestRead), d.Write.Count, us(d.Write.Mean()))
			if d.Untracked > 0 || d.Untimed > 0 {
				fmt.Fprintf(stdout, "         %-10s %d reads not tracked for age (slots full), %d requests not timed (queue/iostats off?)\n",
					name, d.Untracked, d.Untimed)
			}
		}
		// The kernel skips a run of the probe that would nest in another
		// BPF program on its CPU: a request so skipped is missing from the
		// figures above (a completion) or from the oldest read (an issue).
		if m, err := p.Missed(); err == nil && m > missed {
			fmt.Fprintf(stdout, "         %d probe runs skipped by the kernel (nested in another BPF program): those requests are missing above\n", m-missed)
			missed = m
		}
		if *count > 0 && n >= *count {
			return nil
		}
	}
}

// us formats a latency in microseconds, or milliseconds from 10 ms; "-"
// for none.
func us(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
}
