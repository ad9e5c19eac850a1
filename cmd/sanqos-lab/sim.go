package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/sim"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// msFlag is a latency flag that takes a duration ("15ms") or a plain
// number of milliseconds ("15").
type msFlag float64

func (m *msFlag) String() string { return strconv.FormatFloat(float64(*m), 'g', -1, 64) + "ms" }
func (m *msFlag) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		*m = msFlag(f)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a latency such as 15ms or 15")
	}
	*m = msFlag(float64(d) / float64(time.Millisecond))
	return nil
}

func cmdSim(_ context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseSim(args, stderr)
	if err != nil {
		return err
	}
	if o.report != "" {
		if err := sim.Report(o.report, o.cfg.Seed); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s\n", strings.TrimRight(o.report, "/")+"/sim/")
		return nil
	}
	res, err := sim.Run(o.cfg)
	if err != nil {
		return usageError(o.fs, "%v", err)
	}
	if o.plotPath != "" {
		if err := res.Plot(o.plotPath); err != nil {
			return err
		}
	}
	if o.csvPath != "" {
		if err := writeFileWith(o.csvPath, res.WriteCSV); err != nil {
			return err
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res.Summary)
	}
	printSimSummary(stdout, o.cfg, res.Summary)
	if o.cfg.Scenario.Name == "tenants" {
		// The tenants experiment's checks (issue 36), as its test holds them.
		rep := sim.CheckTenants(res, 10*time.Second)
		fmt.Fprint(stdout, rep)
		if f := rep.Failures(); len(f) > 0 {
			fmt.Fprintf(stdout, "tenants' checks FAILED: %s\n", strings.Join(f, "; "))
		} else {
			fmt.Fprintln(stdout, "tenants' checks hold")
		}
	}
	return nil
}

// simOptions are sanqos sim's parsed and checked command line.
type simOptions struct {
	fs                        *flag.FlagSet
	cfg                       sim.Config
	report, plotPath, csvPath string
	asJSON                    bool
}

// parseSim parses and checks sanqos sim's flags into a simulation config.
func parseSim(args []string, stderr io.Writer) (simOptions, error) {
	fs := newFlagSet("sim", "sanqos sim [--scenario thesis] [--controller pid|thesis|none] [--threshold 15ms] [--duration 300s] [--seed 1] [--json] [--plot FILE.png] [--csv FILE] | --report DIR",
		`Run the deterministic simulation of the thesis experiment (Fig. 5.9–5.13).

Twelve sequential 64 KiB sync writer threads on three consumers are switched
on together, write a fixed amount each, pause 5 s and start again; one 8 KiB
random reader limited to 256 kB/s shares the same disk array (a model of the
thesis's ten 10k rpm disks). Every 100 ms of virtual time the simulated
/proc/diskstats goes through sanqos's real parser and engine, whose packet
delay slows the writers. The same seed gives the same result.

Without --json a short summary is printed. Latency figures are over the
1-second samples of the reader's mean wait while the writers are on.
--report DIR runs none, pid and thesis at 15 ms and pid at 10 and 20 ms and
writes DIR/sim/ (figures, summary.json, index.html).`, stderr)
	scenario := fs.String("scenario", "thesis", "workload to simulate: "+strings.Join(sim.Scenarios(), ", "))
	ctl := fs.String("controller", "pid", "controller: "+strings.Join(control.Names(), ", "))
	threshold := msFlag(15)
	fs.Var(&threshold, "threshold", "read latency to hold the resource under (e.g. 15ms)")
	duration := fs.Duration("duration", 300*time.Second, "virtual time to simulate")
	seed := fs.Int64("seed", 1, "random seed (same seed, same result)")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object")
	plotPath := fs.String("plot", "", "write a PNG of latency, delay and write rate over time to `FILE`")
	csvPath := fs.String("csv", "", "write the 1-second samples as CSV to `FILE`")
	report := fs.String("report", "", "write the demo report's sim section to `DIR`/sim and exit")
	profile := fs.String("profile", "", "disk array model instead of the scenario's: "+strings.Join(diskmodel.Profiles(), ", "))
	signal := fs.String("signal", engine.SignalMean, "what the controller holds under the threshold: "+strings.Join(engine.Signals(), ", "))
	noProbe := fs.Bool("no-probe", false, "measure reads from the simulated /proc/diskstats only (whole milliseconds), as without eBPF")
	g := sim.SimGains()
	kp := fs.Float64("kp", g.Kp, "pid proportional gain: a relative error of 1 multiplies the delay by e^kp")
	ti := fs.Duration("ti", g.Ti, "pid integral time")
	td := fs.Duration("td", g.Td, "pid derivative time")
	var rules rulesFlag
	fs.Var(&rules, "rules", "switch rules of the law off, for ablations: a comma-separated list of -RULE, RULE one of "+strings.Join(control.RuleNames(), ", "))
	fixed := msFlag(0)
	fs.Var(&fixed, "fixed-delay", "instead of a controller (with --controller none), delay the writers by this much all along, as the lab's frontier does (e.g. 10ms)")
	if err := parseFlags(fs, args); err != nil {
		return simOptions{}, err
	}
	o := simOptions{fs: fs, report: *report, plotPath: *plotPath, csvPath: *csvPath, asJSON: *asJSON}
	bad := func(format string, a ...any) (simOptions, error) { return o, usageError(fs, format, a...) }
	cfg := sim.DefaultConfig()
	cfg.Seed = *seed
	o.cfg = cfg
	if *report != "" {
		return o, nil
	}
	sc, err := sim.ScenarioByName(*scenario)
	if err != nil {
		return bad("%v", err)
	}
	if *profile != "" {
		prof, err := diskmodel.ProfileByName(*profile)
		if err != nil {
			return bad("%v", err)
		}
		sc.Disk = prof
	}
	if err := engine.CheckSignal(*signal); err != nil {
		return bad("--%v", err)
	}
	cfg.RulesOff = rules
	cfg.Scenario = sc
	cfg.Signal, cfg.NoProbe = *signal, *noProbe
	cfg.Controller = *ctl
	cfg.ThresholdMs = float64(threshold)
	cfg.FixedDelayMs = float64(fixed)
	cfg.Duration = *duration
	cfg.Gains.Kp, cfg.Gains.Ti, cfg.Gains.Td = *kp, *ti, *td
	switch {
	case cfg.Duration < time.Second || cfg.Duration > 24*time.Hour:
		return bad("--duration %v: want between 1s and 24h of virtual time, e.g. 300s", cfg.Duration)
	case cfg.ThresholdMs <= 0:
		return bad("--threshold %v: want a positive latency, e.g. 15ms", threshold.String())
	case cfg.FixedDelayMs < 0:
		return bad("--fixed-delay %v: want a positive delay, e.g. 10ms", fixed.String())
	}
	o.cfg = cfg
	return o, nil
}

// printSimSummary prints a run's summary for people.
func printSimSummary(w io.Writer, cfg sim.Config, s sim.Summary) {
	fmt.Fprintf(w, "scenario %s on %s, controller %s, threshold %g ms, %v virtual, seed %d\n",
		s.Scenario, cfg.Scenario.Disk.Name, s.Controller, s.ThresholdMs, cfg.Duration, s.Seed)
	if cfg.FixedDelayMs > 0 {
		fmt.Fprintf(w, "  fixed delay      %g ms on every writer, all along\n", cfg.FixedDelayMs)
	}
	if len(cfg.RulesOff) > 0 {
		fmt.Fprintf(w, "  rules off        %s (an ablation, not the law)\n", strings.Join(cfg.RulesOff, ", "))
	}
	if s.Gains != nil {
		fmt.Fprintf(w, "  pid gains        Kp %g, Ti %v, Td %v, max delay %g ms\n", s.Gains.Kp, s.Gains.Ti, s.Gains.Td, s.Gains.UMaxMs)
	}
	fmt.Fprintf(w, "  reader latency   mean %.1f ms, p50 %.1f, p95 %.1f, p99 %.1f, max %.1f (alone: %.1f ms)\n",
		s.ReadLatencyMs.Mean, s.ReadLatencyMs.P50, s.ReadLatencyMs.P95, s.ReadLatencyMs.P99, s.ReadLatencyMs.Max, s.ReaderIdleMs)
	fmt.Fprintf(w, "  over 1.2×thresh. %.1f %% of %d seconds with writers on\n", s.OverThresholdPct, s.ActiveSamples)
	fmt.Fprintf(w, "  writers          %.1f MB/s aggregate while on\n", s.WriteMBs)
	fmt.Fprintf(w, "  throttle delay   mean %.1f ms, max %.1f ms\n", s.ThrottleMs.Mean, s.ThrottleMs.Max)
	fmt.Fprintf(w, "  reader achieved  %.0f kB/s (asks for 256)\n", s.ReaderKBs)
}

// writeFileWith creates path and fills it with write.
func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// rulesFlag is --rules: "-armed,-rest" switches those rules off.
// Only switching off is offered: which rules a law runs is its table's
// (control.LawRules).
type rulesFlag []string

func (r *rulesFlag) String() string {
	if r == nil || len(*r) == 0 {
		return ""
	}
	return "-" + strings.Join(*r, ",-")
}

func (r *rulesFlag) Set(s string) error {
	var off []string
	for _, x := range strings.Split(s, ",") {
		name, ok := strings.CutPrefix(strings.TrimSpace(x), "-")
		if !ok {
			return fmt.Errorf("%q: want -RULE to switch a rule off (the law's table says which are on)", x)
		}
		off = append(off, name)
	}
	if err := control.CheckRules(off); err != nil {
		return err
	}
	*r = off
	return nil
}
