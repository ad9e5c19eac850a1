package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/datapath"
	"github.com/sanqos/sanqos/internal/stats"
)

// datapathExperiments is issue 35's side-by-side measurement of the data
// path's costs: it needs no lab, disk or iSCSI, only two namespaces.
func datapathExperiments() []Experiment {
	return []Experiment{{
		Name:  "datapath",
		Title: "The data path's costs per backend, side by side with no sanqos, on this kernel (issue 35)",
		Describe: "two network namespaces joined by veth (one MSS per packet), no lab: an idle daemon running against the same " +
			"daemon stopped (SIGSTOP) beside a bulk upload and 4 KiB round trips in ABBA pairs (median ratio, 99 % interval); " +
			"a ping-pong held 1 and 5 ms (hold error p50/p99/max); a bulk flow whose every segment is held 1 ms (htb: capped), " +
			"packets/s per core and CPU per delayed packet, the daemon's own; every backend this kernel runs (none, nfqueue, htb; " +
			"edt with sch_fq, netem with sch_netem) in interleaved rounds.",
		custom: runDatapath,
		fixed:  func(short bool) time.Duration { return datapathShape(short, 3).estimate() },
	}}
}

// NeedsLab says whether the experiment brings up the lab (datapath does
// not: it makes two namespaces of its own).
func (x Experiment) NeedsLab() bool { return x.custom == nil }

// dpShape sizes the measurement: full about 8 minutes for two or three
// backends beside none, --short under a minute.
type dpShape struct {
	cost datapath.CostConfig
	idle datapath.IdleConfig
}

func datapathShape(short bool, backends int) dpShape {
	s := dpShape{
		cost: datapath.CostConfig{Warm: 40, Pings: 300, Rounds: 5, Bulk: 3 * time.Second, ReadDelay: time.Millisecond,
			Holds: []time.Duration{time.Millisecond, 5 * time.Millisecond}, RateCap: "100MB/s"},
		idle: datapath.IdleConfig{Arm: 250 * time.Millisecond},
	}
	// Many short pairs narrow the interval more than few long ones: the
	// idle pairs of all backends get about 5 minutes together.
	s.idle.Pairs = max(stats.MinPairs(0.99), min(120, int(5*time.Minute/(time.Duration(max(backends, 1))*pairOf(s.idle)))))
	if short {
		s.cost.Pings, s.cost.Rounds, s.cost.Bulk = 100, 2, time.Second
		s.idle.Pairs, s.idle.Arm = stats.MinPairs(0.99), 250*time.Millisecond
	}
	s.cost.Backends = make([]string, backends+1)
	return s
}

// pair is roughly how long one idle pair takes: two arms, each a
// warm-up, the upload, the round trips and a tick after resuming.
func pairOf(c datapath.IdleConfig) time.Duration { return 2 * (2*c.Arm + 300*time.Millisecond) }

// estimate is roughly how long the measurement takes.
func (s dpShape) estimate() time.Duration {
	n := time.Duration(len(s.cost.Backends) - 1)
	ping := time.Duration(s.cost.Warm+s.cost.Pings) * (time.Millisecond + 150*time.Microsecond)
	var held time.Duration
	for _, h := range s.cost.Holds {
		held += time.Duration(s.cost.Warm+s.cost.Pings) * h
	}
	perRound := ping + s.cost.Bulk + n*(held+s.cost.Bulk+2*time.Second)
	idle := n * time.Duration(s.idle.Pairs) * pairOf(s.idle)
	return 10*time.Second + time.Duration(s.cost.Rounds)*perRound + idle
}

// runDatapath is the datapath experiment: it takes the lab's lock (it
// measures CPU, so it must not run beside a lab) and removes its
// namespaces, daemons and their kernel objects on every path.
func runDatapath(ctx context.Context, x Experiment, o Options) (*Summary, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the datapath experiment creates namespaces and runs the daemon: run as root")
	}
	if o.Out == "" {
		return nil, errors.New("no output directory: give --out DIR")
	}
	if len(o.Runs) > 0 {
		return nil, errors.New("datapath has no runs to choose; leave --runs out")
	}
	bin, err := sanqosBinary(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	if err := waitForFreeLab(ctx, o); err != nil {
		return nil, err
	}
	release, err := lab.Hold(ctx, o.Progress)
	if err != nil {
		return nil, err
	}
	defer release()
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "datapath: "+format+"\n", args...)
		}
	}
	defer datapath.Teardown()
	if err := datapath.Setup(); err != nil {
		return nil, err
	}
	s := &Summary{Experiment: x.Name, Title: x.Title, Describe: x.Describe, Short: o.Short, Started: time.Now().UTC(), out: o.Out}
	d, err := measureDatapath(ctx, o.Short, bin, say)
	s.Datapath = d
	s.Finished = time.Now().UTC()
	if err != nil {
		return s, fmt.Errorf("datapath: %w", err)
	}
	return s, writeDatapath(s)
}

// measureDatapath chooses the backends and runs the two measurements.
func measureDatapath(ctx context.Context, short bool, bin string, say func(string, ...any)) (*DatapathResult, error) {
	d := &DatapathResult{Kernel: kernelRelease()}
	d.Backends = []string{"none", "nfqueue", "htb"}
	for _, b := range []struct{ name, qdisc string }{{"edt", "fq"}, {"netem", "netem"}} {
		if datapath.HasQdisc(b.qdisc) {
			d.Backends = append(d.Backends, b.name)
			continue
		}
		d.Skipped = append(d.Skipped, Skip{b.name, fmt.Sprintf("this kernel (%s) has no sch_%s; run `make kernel-lab SUITE=datapath`", d.Kernel, b.qdisc)})
	}
	for _, sk := range d.Skipped {
		say("skipping %s: %s", sk.Backend, sk.Why)
	}
	shape := datapathShape(short, len(d.Backends)-1)
	shape.cost.Backends, shape.cost.Bin, shape.cost.Progress = d.Backends, bin, say
	shape.idle.Backends, shape.idle.Bin, shape.idle.Progress = d.Backends[1:], bin, say
	say("%s on %s, about %s", strings.Join(d.Backends, ", "), d.Kernel, shape.estimate().Round(10*time.Second))
	idle, err := datapath.MeasureIdle(ctx, shape.idle)
	d.idle, d.IdleArm = idle, shape.idle.Arm
	if err != nil {
		return d, err
	}
	cost, err := datapath.MeasureCost(ctx, shape.cost)
	d.cost = cost
	if err != nil {
		return d, err
	}
	d.fill()
	return d, nil
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// writeDatapath writes the plots, report.md, summary.json and
// report.html.
func writeDatapath(s *Summary) error {
	var err error
	if s.Plots, err = plotDatapath(s.out, s.Datapath); err != nil {
		return err
	}
	s.Checks = datapathChecks(s.Datapath)
	if err := os.WriteFile(filepath.Join(s.out, "report.md"), []byte(datapathMarkdown(s)), 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := writeJSON(filepath.Join(s.out, "summary.json"), s); err != nil {
		return err
	}
	return WriteHTML(filepath.Join(s.out, "report.html"), s, "")
}
