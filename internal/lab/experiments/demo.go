package experiments

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/sim"
)

// DemoExperiment is what the demonstration runs, in its short version.
const DemoExperiment = "fig5.11"

// Demo writes the demonstration report to o.Out: the simulator's section
// (before the lab, so its CPU load does not disturb the measurements),
// then fig5.11 --short on a fresh lab (taken down on every path), then
// report.html with both and summary.json in fig5.11's schema.
func Demo(ctx context.Context, o Options, lo lab.Options) (*Summary, error) {
	x, err := Lookup(DemoExperiment)
	if err != nil {
		return nil, err
	}
	o.Short = true
	if o.Out == "" {
		return nil, fmt.Errorf("no output directory: give --out DIR")
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "demo: simulating the thesis experiment (%s)\n", filepath.Join(o.Out, "sim"))
	}
	if err := sim.Report(o.Out, 1); err != nil {
		return nil, fmt.Errorf("the simulator's section: %w", err)
	}
	simHTML, err := os.ReadFile(filepath.Join(o.Out, "sim", "index.html"))
	if err != nil {
		return nil, fmt.Errorf("reading the simulator's section: %w", err)
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "demo: %s --short in the lab, about %s\n", x.Name, x.Estimate(true).Round(60e9))
	}
	var s *Summary
	err = WithLab(ctx, o, lo, func(l *lab.Lab) error {
		var err error
		s, err = x.RunOn(ctx, l, o)
		return err
	})
	if err != nil {
		return s, err
	}
	s.Sim = &SimReference{Dir: "sim"}
	if err := writeJSON(filepath.Join(o.Out, "summary.json"), s); err != nil {
		return s, err
	}
	if err := WriteHTML(filepath.Join(o.Out, "report.html"), s, rebase(string(simHTML), "sim")); err != nil {
		return s, err
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "demo: wrote %s and %s\n", filepath.Join(o.Out, "report.html"), filepath.Join(o.Out, "summary.json"))
	}
	return s, nil
}
