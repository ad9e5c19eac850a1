package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/sim/diskmodel"
)

// Options configure an experiment.
type Options struct {
	// Out is the directory of the results (created if missing).
	Out string
	// Short runs the shortened version.
	Short bool
	// Sanqos is the sanqos daemon binary; "" finds it next to the running
	// executable (sanqos-lab) or in PATH (lab.FindDaemon).
	Sanqos string
	// Gains override the pid controller's gains in the daemon's
	// configuration (zero fields: control.DefaultParams).
	Gains Gains
	// Progress receives one line per phase and one every 10 s.
	Progress io.Writer
	// LabWait is how long to wait for somebody else's lab to go away
	// before giving up; 0 means 10 minutes.
	LabWait time.Duration
	// Runs, when not empty, runs only the experiment's runs of these
	// names (e.g. "none", "pid-10ms"), in the experiment's order.
	Runs []string
	// ThresholdMs, when > 0, gives every run under a controller this
	// threshold, and uncontrolled runs are judged against it (Run, not
	// RunAll): an experiment's promise is chosen for its own disk, between
	// the reader's wait alone and behind the writers, and other storage
	// (--storage dir:PATH) needs its own.
	ThresholdMs float64
	// RulesOff switches these rules of pid's law off in every run under
	// pid (pid.rules_off), each run renamed with a -no-RULE suffix: the
	// ablation's lab column (docs/ablation.md).
	RulesOff []string
	// Resume: RunAll keeps an experiment whose complete results are
	// already in its directory instead of running it again, so that a
	// long 'lab run all' stopped part-way goes on where it stopped.
	Resume bool
}

// Experiment is one experiment of the thesis.
type Experiment struct {
	Name, Title string
	// Describe says what is run, for --help and the report.
	Describe string
	plan     func(short bool) []plannedRun
	// refMs is the threshold an uncontrolled run's over-threshold share
	// is measured against.
	refMs float64
	// profile is the emulated disk the experiment is meant for ("": the
	// lab's default, thesis-2010); --storage overrides it.
	profile string
	plots   func(s *Summary, runs []*RunResult) ([]string, error)
	// analyze, when set, adds the experiment's own results to the
	// summary once every run is done (before the plots).
	analyze func(s *Summary)
	// sweep, set instead of plan, makes it an experiment of repeated
	// transfers (fig5.5, fig5.6, overhead); plots then draws from
	// Summary.Sweep.
	sweep func(short bool) Sweep
	// nfs runs the loads over NFS from the lab's NFS target, and the
	// daemon with the socket adapter on its port (nfs.go).
	nfs bool
	// nfsDirtyBytes caps the NFS export device's dirty page cache
	// (lab.Options.NFSDirtyBytes).
	nfsDirtyBytes int64
	// custom, instead of plan or sweep, runs one without a lab; fixed: its duration.
	custom func(ctx context.Context, x Experiment, o Options) (*Summary, error)
	fixed  func(short bool) time.Duration
}

// plannedRun is one run of an experiment.
type plannedRun struct {
	name string
	w    Workload
	c    Control
}

// overhead is a run's time besides its load: logins, the daemon's start,
// stopping and reading counters.
func (r plannedRun) overhead() time.Duration {
	return r.c.startSlack() + 3*time.Second
}

// Summary is summary.json.
type Summary struct {
	Experiment string        `json:"experiment"`
	Title      string        `json:"title"`
	Describe   string        `json:"describe"`
	Short      bool          `json:"short"`
	Started    time.Time     `json:"started"`
	Finished   time.Time     `json:"finished"`
	Lab        LabInfo       `json:"lab"`
	Gains      Gains         `json:"pid_gains"`
	Runs       []*RunResult  `json:"runs"`
	Plots      []string      `json:"plots"`
	Checks     []Check       `json:"checks,omitempty"`
	Sim        *SimReference `json:"sim,omitempty"`
	// Frontier is the frontier experiment's result.
	Frontier *Frontier `json:"frontier,omitempty"`
	// Sweep is a transfer experiment's result.
	Sweep *SweepResult `json:"sweep,omitempty"`
	// Fig43 is fig4.3's comparison of the smoothings.
	Fig43 *Fig43 `json:"fig4_3,omitempty"`
	// Datapath is the datapath experiment's result.
	Datapath *DatapathResult `json:"datapath,omitempty"`
	// out is the experiment's directory (Options.Out).
	out string
}

// SimReference points at the simulator's section of a demo report.
type SimReference struct {
	Dir string `json:"dir"`
}

// LabInfo is what the report says of the lab.
type LabInfo struct {
	Storage  string       `json:"storage"`
	LUNBytes int64        `json:"lun_bytes"`
	MTU      int          `json:"mtu"`
	Offloads lab.Offloads `json:"offloads"`
	Portal   string       `json:"portal"`
	Loadgen  string       `json:"loadgen,omitempty"`
	// NFS is the export the loads used, for an NFS experiment.
	NFS string `json:"nfs,omitempty"`
	// Disk is the emulated array's model, for emulated storage: a result
	// holds only for the disk it was measured on.
	Disk *diskmodel.Profile `json:"disk,omitempty"`
}

// Names lists the experiments.
func Names() []string {
	var out []string
	for _, e := range registry() {
		out = append(out, e.Name)
	}
	return out
}

// Lookup finds an experiment by name.
func Lookup(name string) (Experiment, error) {
	for _, e := range registry() {
		if e.Name == name {
			return e, nil
		}
	}
	return Experiment{}, fmt.Errorf("no experiment %q (have %s)", name, strings.Join(Names(), ", "))
}

// Estimate is roughly how long the experiment takes, lab up included.
func (x Experiment) Estimate(short bool) time.Duration {
	if x.fixed != nil {
		return x.fixed(short)
	}
	d := 20 * time.Second
	if x.sweep != nil {
		d += x.sweep(short).estimate
	}
	for _, r := range x.planned(short) {
		d += r.overhead() + r.w.Total
	}
	return d
}

// Run brings up a lab (after waiting for any other to go away), runs the
// experiment, writes its results to o.Out and takes the lab down on every
// path, Ctrl-C included.
func Run(ctx context.Context, name string, o Options, lo lab.Options) (*Summary, error) {
	x, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	x = x.WithThreshold(o.ThresholdMs).WithRulesOff(o.RulesOff)
	// A misspelt run name fails before the lab comes up.
	if _, err := x.selected(o); err != nil {
		return nil, err
	}
	if x.custom != nil {
		return x.custom(ctx, x, o)
	}
	lo.NFS = lo.NFS || x.nfs
	if x.nfsDirtyBytes > 0 {
		lo.NFSDirtyBytes = x.nfsDirtyBytes
	}
	var s *Summary
	err = WithLab(ctx, o, lo, func(l *lab.Lab) error {
		var err error
		s, err = x.RunOn(ctx, l, o)
		return err
	})
	return s, err
}

// RunNames lists the names of the experiment's runs, in order.
func (x Experiment) RunNames(short bool) []string {
	var out []string
	for _, r := range x.planned(short) {
		out = append(out, r.name)
	}
	return out
}

// planned is the experiment's runs (none for a sweep).
func (x Experiment) planned(short bool) []plannedRun {
	if x.plan == nil {
		return nil
	}
	return x.plan(short)
}

// selected is the experiment's plan cut down to o.Runs.
func (x Experiment) selected(o Options) ([]plannedRun, error) {
	plan := x.planned(o.Short)
	if len(o.Runs) > 0 && x.sweep != nil {
		return nil, fmt.Errorf("%s is a sweep of transfers and has no runs to choose; leave --runs out", x.Name)
	}
	if len(o.Runs) == 0 {
		return plan, nil
	}
	want := map[string]bool{}
	for _, n := range o.Runs {
		want[n] = true
	}
	var out []plannedRun
	for _, r := range plan {
		if want[r.name] {
			out = append(out, r)
			delete(want, r.name)
		}
	}
	if len(want) > 0 {
		var bad []string
		for n := range want {
			bad = append(bad, n)
		}
		sort.Strings(bad)
		return nil, fmt.Errorf("%s has no run %s; its runs are %s", x.Name, strings.Join(bad, ", "), strings.Join(x.RunNames(o.Short), ", "))
	}
	return out, nil
}

// WithLab checks what a run needs, waits until no lab is up, brings one
// up, calls f and takes the lab down whatever happens.
func WithLab(ctx context.Context, o Options, lo lab.Options, f func(*lab.Lab) error) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the lab experiments create namespaces, loop devices and iptables rules: run as root")
	}
	if o.Out == "" {
		return errors.New("no output directory: give --out DIR")
	}
	if _, err := sanqosBinary(o); err != nil {
		return err
	}
	if lo.Loadgen == "" {
		if lo.Loadgen, err = lab.FindLoadgen(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.Out, err)
	}
	if err := waitForFreeLab(ctx, o); err != nil {
		return err
	}
	if lo.Progress == nil {
		lo.Progress = o.Progress
	}
	l, err := lab.Up(ctx, lo)
	if err != nil {
		return fmt.Errorf("bringing up the lab: %w", err)
	}
	defer func() {
		if o.Progress != nil {
			fmt.Fprintln(o.Progress, "lab down: removing everything the lab created")
		}
		if derr := l.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("taking the lab down: %w", derr))
		}
	}()
	return f(l)
}

func sanqosBinary(o Options) (string, error) {
	if o.Sanqos != "" {
		if _, err := os.Stat(o.Sanqos); err != nil {
			return "", fmt.Errorf("the sanqos binary for the daemon: %w", err)
		}
		return o.Sanqos, nil
	}
	return lab.FindDaemon()
}

// waitForFreeLab waits, polling every 20 s, while another lab is up: only
// one can exist, and it is somebody else's to take down.
func waitForFreeLab(ctx context.Context, o Options) error {
	limit := o.LabWait
	if limit == 0 {
		limit = 10 * time.Minute
	}
	state := filepath.Join(lab.StateDir, "state.json")
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(state); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a lab is still up after waiting %s (%s exists): if nobody is using it, remove it with 'sanqos lab down' and retry", limit, state)
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "waiting: another lab is up (%s); checking again in 20s, giving up in %s\n",
				state, time.Until(deadline).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Second):
		}
	}
}

// RunOn runs the experiment on a lab that is up and writes summary.json,
// the plots and report.html to o.Out.
func (x Experiment) RunOn(ctx context.Context, l *lab.Lab, o Options) (*Summary, error) {
	sanqos, err := sanqosBinary(o)
	if err != nil {
		return nil, err
	}
	o.Sanqos = sanqos
	v, err := viewOf(l, x.nfs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	plan, err := x.selected(o)
	if err != nil {
		return nil, err
	}
	st := l.State()
	s := &Summary{Experiment: x.Name, Title: x.Title, Describe: x.Describe, Short: o.Short, Started: time.Now().UTC(),
		Lab:   LabInfo{Storage: st.Storage.String(), LUNBytes: st.Size, MTU: st.MTU, Offloads: st.Offloads, Portal: st.Target.Portal()},
		Gains: o.Gains.WithDefaults(), out: o.Out}
	if x.nfs {
		s.Lab.NFS = l.NFS().URL
	}
	if st.Storage.Kind == "emu" {
		if p, err := diskmodel.ProfileByName(st.Storage.Profile); err == nil {
			s.Lab.Disk = &p
		}
	}
	if err := stopLeftoverDaemons("/proc"); err != nil {
		return nil, err
	}
	e := &env{l: l, v: v, o: o, count: nstatCounter{run: runInNS}, prog: newProgress(o.Progress, x, plan)}
	if x.sweep != nil {
		if s.Sweep, err = e.runSweep(ctx, x.sweep(o.Short)); err != nil {
			return s, fmt.Errorf("%s: %w", x.Name, err)
		}
	}
	for i, r := range plan {
		e.prog.startRun(i)
		res, err := e.runOne(ctx, r.name, r.w, r.c, x.refMs)
		if err != nil {
			return s, fmt.Errorf("%s, run %s: %w", x.Name, r.name, err)
		}
		s.Runs = append(s.Runs, res)
		e.prog.doneRun(res)
	}
	s.Finished = time.Now().UTC()
	if x.analyze != nil {
		x.analyze(s)
	}
	if s.Plots, err = x.plots(s, s.Runs); err != nil {
		return s, err
	}
	s.Checks = checks(s)
	if err := writeJSON(filepath.Join(o.Out, "summary.json"), s); err != nil {
		return s, err
	}
	if err := WriteHTML(filepath.Join(o.Out, "report.html"), s, ""); err != nil {
		return s, err
	}
	return s, nil
}

func runInNS(ctx context.Context, ns string, argv ...string) ([]byte, error) {
	out, err := lab.Command(ctx, ns, argv...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), ns, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return out, fmt.Errorf("%s in %s: %w", strings.Join(argv, " "), ns, err)
	}
	return out, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (c Control) describe() string {
	switch c.Controller {
	case "":
		return "no daemon"
	case "none":
		if c.FixedDelayMs > 0 {
			return fmt.Sprintf("fixed write delay %g ms, daemon observing", c.FixedDelayMs)
		}
		return "uncontrolled, daemon observing"
	}
	pol := c.Policy
	if pol == "" {
		pol = "read-over-write"
	}
	d := fmt.Sprintf("%s at %g ms, %s", c.Controller, c.ThresholdMs, pol)
	if len(c.RulesOff) > 0 {
		d += ", without " + strings.Join(c.RulesOff, ", ")
	}
	return d
}

// Profile is the emulated disk profile the experiment runs on unless the
// user names other storage.
func (x Experiment) Profile() string {
	if x.profile == "" {
		return lab.DefaultStorage.Profile
	}
	return x.profile
}
