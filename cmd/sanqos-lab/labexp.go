package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/experiments"
)

// experimentLUNSize is the LUN size of the experiments' lab: one
// sequential writer at the emulated disk's 43 MB/s covers 4 GiB in about
// 100 s, longer than any run's writing window (fig5.7: 60 s), so no writer
// stops early for having written its whole region.
const experimentLUNSize = "4GiB"

// labExperimentsHelp lists the experiments for --help.
func labExperimentsHelp() string {
	var b strings.Builder
	for _, n := range experiments.Names() {
		x, _ := experiments.Lookup(n)
		fmt.Fprintf(&b, "  %-8s %s (about %s; --short %s)\n", n, x.Title,
			x.Estimate(false).Round(time.Minute), x.Estimate(true).Round(time.Minute))
		if !x.NeedsLab() {
			fmt.Fprintf(&b, "  %-8s no lab: two namespaces of its own (no runs to choose); writes report.md too\n", "")
		} else if runs := x.RunNames(false); len(runs) > 0 {
			fmt.Fprintf(&b, "  %-8s runs: %s\n", "", strings.Join(runs, ", "))
		} else {
			fmt.Fprintf(&b, "  %-8s a sweep of repeated transfers (no runs to choose)\n", "")
		}
	}
	return b.String()
}

// labRunHelp is lab run's --help: the experiments and how long they take.
func labRunHelp() string {
	return `Run one experiment of the thesis in a fresh lab (waiting up to 10 minutes
if another lab is up) and write to DIR: summary.json, report.html, PNG plots
and, per run, the raw JSON-lines logs of the load generators and of the
daemon's --record. The lab is taken down at the end, on error and on Ctrl-C.

EXPERIMENT "all" runs the thesis's experiments one after the other (` + strings.Join(experiments.AllNames, ", ") + `),
each in its own lab and DIR/NAME, and writes DIR/index.html: each one's plots,
the thesis's figure or number beside ours and a verdict (--short: about
` + experiments.AllEstimate(true).Round(time.Minute).String() + `; in full about ` + experiments.AllEstimate(false).Round(time.Minute).String() + `).
Several experiments named with commas run the same way, e.g. what the
controller is judged by, in one go: frontier,randw,surge24,guarantees (about ` + experiments.Estimate([]string{"frontier", "randw", "surge24", "guarantees"}, false).Round(time.Minute).String() + `).
With --resume, an experiment whose complete results (summary.json) are
already in DIR/NAME — same --short, every run, same gains — is kept, not
run again: a long run stopped by Ctrl-C or a reboot goes on where it
stopped, and the index adds up the time every experiment took.

Experiments:
` + labExperimentsHelp()
}

// labRun is 'sanqos lab run EXPERIMENT --out DIR [--short]'.
func labRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab run", "sanqos lab run EXPERIMENT[,EXPERIMENT...]|all --out DIR [--short] [--resume] [--runs NAME,...] [--threshold D] [--rules-off RULE,...] [--kp K --ti D --td D --u-max D]", labRunHelp(), stderr)
	out := fs.String("out", "", "directory for the results (required)")
	short := fs.Bool("short", false, "run the shortened version")
	ctl := controlFlags(fs)
	runs := fs.String("runs", "", "run only these runs of the experiment, comma-separated (e.g. none,pid-10ms)")
	storage := fs.String("storage", "", "where LUN images live: emu:PROFILE, emu-mem:PROFILE (the emulated disk's backing files in RAM) or dir:PATH (default: the experiment's, emu:thesis-2010; emu-mem:ssd for ssd)")
	seed := fs.Int64("seed", 1, "seed of the emulated disk's random numbers")
	resume := fs.Bool("resume", false, "with all or a list: keep the experiments whose complete results are already in DIR/NAME")
	size := fs.String("size", experimentLUNSize, "size of each LUN image (sparse); a single writer must not reach its end within a run")
	// The experiment's name comes first; flags follow it.
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "sanqos lab run: name an experiment: %s\n", strings.Join(experiments.Names(), ", "))
		return errUsage
	}
	name := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintf(stderr, "sanqos lab run: --out DIR is required\n")
		return errUsage
	}
	if !ctl.valid(stderr) {
		return errUsage
	}
	o := experiments.Options{Out: *out, Short: *short, Progress: stdout, Resume: *resume,
		ThresholdMs: ms(*ctl.threshold), RulesOff: ctl.off(), Gains: experiments.Gains{Kp: *ctl.kp, Ti: *ctl.ti, Td: *ctl.td, UMaxMs: ms(*ctl.umax)}}
	if name == "all" || strings.Contains(name, ",") {
		if o.ThresholdMs > 0 {
			fmt.Fprintf(stderr, "sanqos lab run %s: --threshold sets one experiment's promise; leave it out\n", name)
			return errUsage
		}
		return labRunAll(ctx, name, *runs, o, func(profile string) (lab.Options, error) { return labOptions(profile, *storage, *size, *seed, stdout) }, stdout, stderr)
	}
	x, err := experiments.Lookup(name)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos lab run: %v (or all)\n", err)
		return errUsage
	}
	if *resume {
		fmt.Fprintf(stderr, "sanqos lab run %s: --resume keeps experiments of all or a list; one experiment alone always runs\n", name)
		return errUsage
	}
	only, err := selectRuns(x.WithThreshold(o.ThresholdMs).WithRulesOff(o.RulesOff), *runs, *short)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos lab run: %v\n", err)
		return errUsage
	}
	lo, err := labOptions(x.Profile(), *storage, *size, *seed, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos lab run: %v\n", err)
		return errUsage
	}
	o.Runs = only
	s, err := experiments.Run(ctx, name, o, lo)
	if err != nil {
		return err
	}
	printChecks(stdout, s)
	if !x.NeedsLab() {
		fmt.Fprintf(stdout, "wrote %s/report.md, %s/summary.json and %s/report.html\n", *out, *out, *out)
		return nil
	}
	fmt.Fprintf(stdout, "wrote %s/summary.json and %s/report.html\n", *out, *out)
	return nil
}

// controlFlagSet is what the controllers of an experiment's runs are
// given instead of the experiment's own settings.
type controlFlagSet struct {
	kp                      *float64
	ti, td, umax, threshold *time.Duration
	rulesOff                *string
}

func controlFlags(fs *flag.FlagSet) controlFlagSet {
	return controlFlagSet{
		kp:        fs.Float64("kp", 0, "pid gain Kp in the daemon's configuration (0: the default)"),
		ti:        fs.Duration("ti", 0, "pid integral time Ti (0: the default)"),
		td:        fs.Duration("td", 0, "pid derivative time Td (0: the default)"),
		umax:      fs.Duration("u-max", 0, "pid's largest delay u_max (0: the default)"),
		threshold: fs.Duration("threshold", 0, "give every controlled run this threshold instead of the experiment's (e.g. 600us), and judge uncontrolled runs by it: for storage other than the experiment's own disk"),
		rulesOff:  fs.String("rules-off", "", "switch these rules of pid's law off, comma-separated (e.g. armed,gain; the daemon's pid.rules_off), in every run under pid, each renamed pid-…-no-RULE: what a rule is worth in the lab (docs/ablation.md); rules: "+strings.Join(control.RuleNames(), ", ")),
	}
}

// off is --rules-off as a list.
func (c controlFlagSet) off() []string {
	var off []string
	for _, r := range strings.Split(*c.rulesOff, ",") {
		if r = strings.TrimSpace(r); r != "" {
			off = append(off, r)
		}
	}
	return off
}

// valid says on stderr what is wrong with the flags, if anything: a
// negative value, or a threshold the daemon would refuse once the lab
// is up.
func (c controlFlagSet) valid(stderr io.Writer) bool {
	if *c.kp < 0 || *c.ti < 0 || *c.td < 0 || *c.umax < 0 || *c.threshold < 0 {
		fmt.Fprintf(stderr, "sanqos lab run: --kp, --ti, --td, --u-max and --threshold must not be negative\n")
		return false
	}
	if err := control.CheckRules(c.off()); err != nil {
		fmt.Fprintf(stderr, "sanqos lab run: --rules-off: %v\n", err)
		return false
	}
	if *c.threshold > 0 {
		if err := engine.CheckThresholdMs(ms(*c.threshold)); err != nil {
			fmt.Fprintf(stderr, "sanqos lab run: --threshold %v: %v (the daemon's own bounds)\n", *c.threshold, err)
			return false
		}
	}
	return true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// selectRuns reads --runs: names of x's runs, comma-separated.
func selectRuns(x experiments.Experiment, runs string, short bool) ([]string, error) {
	var only []string
	for _, r := range strings.Split(runs, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !slices.Contains(x.RunNames(short), r) {
			return nil, fmt.Errorf("%s has no run %q; its runs are %s", x.Name, r, strings.Join(x.RunNames(short), ", "))
		}
		only = append(only, r)
	}
	return only, nil
}

// labRunAll is 'sanqos lab run all' (or arg a list of experiments): each
// in turn and DIR/index.html with the thesis's result beside ours.
func labRunAll(ctx context.Context, arg, runs string, o experiments.Options, labFor func(string) (lab.Options, error), stdout, stderr io.Writer) error {
	names, err := experiments.ParseNames(arg)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos lab run: %v\n", err)
		return errUsage
	}
	if runs != "" {
		fmt.Fprintf(stderr, "sanqos lab run %s: --runs chooses runs of one experiment; leave it out\n", arg)
		return errUsage
	}
	idx, err := experiments.RunAll(ctx, names, o, labFor)
	for _, e := range idx.Entries {
		fmt.Fprintf(stdout, "%-8s %s; took %s\n", e.Name, e.Verdict, e.TookText())
	}
	if werr := os.WriteFile(filepath.Join(o.Out, "index.md"), []byte(experiments.IndexMarkdown(idx)), 0o644); werr != nil && err == nil {
		err = werr
	}
	took := idx.Finished.Sub(idx.Started).Round(time.Second).String() + " in all"
	if k := idx.Kept(); k > 0 {
		took = fmt.Sprintf("%s this time; with the %d kept, the experiments took %s in all", idx.Finished.Sub(idx.Started).Round(time.Second), k, idx.Took())
	}
	fmt.Fprintf(stdout, "wrote %s/index.html, index.md and index.json (%s)\n", o.Out, took)
	return err
}

// labDemo is 'sanqos lab demo --out DIR'.
func labDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab demo", "sanqos lab demo --out DIR",
		`Write the demonstration report to DIR (about 10 minutes, as root): the
simulator's section, then a fresh lab (emu:thesis-2010) running fig5.11
--short — smalljob against 12 on/off sequential writers, once uncontrolled
and once with sanqos holding the reader at 15 ms — then DIR/report.html
(runs, targets, plots, lab settings, simulation) and DIR/summary.json. The
lab is taken down at the end, on error and on Ctrl-C.`, stderr)
	out := fs.String("out", "", "directory for the report (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		fmt.Fprintf(stderr, "sanqos lab demo: --out DIR is required\n")
		return errUsage
	}
	lo, err := labOptions(lab.DefaultStorage.Profile, "", experimentLUNSize, 1, stdout)
	if err != nil {
		return err
	}
	s, err := experiments.Demo(ctx, experiments.Options{Out: *out, Progress: stdout}, lo)
	if err != nil {
		return err
	}
	printChecks(stdout, s)
	return nil
}

func printChecks(w io.Writer, s *experiments.Summary) {
	for _, r := range s.Runs {
		fmt.Fprintf(w, "%-16s wait p95 %6.1f ms (mean %5.1f), write %5.1f MB/s, reader %5.1f kB/s, retransmits %d\n",
			r.Name, r.WaitMs.P95, r.WaitMs.Mean, r.WriteMBs, r.ReaderKBs, r.Retransmits)
		if t := r.TargetWaitMs; t != nil {
			fmt.Fprintf(w, "%-16s at the target's devices: p95 %.2f ms (mean %.2f)\n", "", t.P95, t.Mean)
		}
		if r.Bursts != nil && r.Bursts.N > 0 {
			fmt.Fprintf(w, "%-16s bursts %s\n", "", r.Bursts.Line())
		}
		if g := r.Guarantees; g != nil && r.Workload.Readers > 1 {
			fmt.Fprintf(w, "%-16s (no writers: write is the readers' MB/s) readers' p95 wait %.1f ms, %.1f MB/s together\n", "", g.ReaderP95Ms, g.ReaderMBs)
		}
	}
	for _, c := range s.Checks {
		mark := "met   "
		if !c.OK {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "%s %s: %s: want %s, got %s\n", mark, c.Run, c.What, c.Want, c.Got)
	}
}
