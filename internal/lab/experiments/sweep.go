package experiments

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/plot"
)

// Sweep is an experiment of repeated transfers (thesis §5.4 and §5.8):
// one initiator, Host, moves Size bytes with Job, Repeats times under
// each condition in turn, and the time each transfer took is the
// measurement.
type Sweep struct {
	Host       string      `json:"host"`
	Job        string      `json:"job"`
	Size       string      `json:"size"`         // the load generator's --size, e.g. 200m
	BS         string      `json:"bs,omitempty"` // its --bs; "" keeps the job's
	Repeats    int         `json:"repeats"`
	Conditions []Condition `json:"conditions"`
	// Compare lists pairs of condition labels to compare with Welch's
	// t-test (overhead: nothing vs each way sanqos can be present).
	Compare [][2]string `json:"compare,omitempty"`
	// estimate is how long the transfers should take, for progress.
	estimate time.Duration
}

// Condition is one setting of a sweep: the observing daemon running or
// not, and a delay set on the host in Direction through it.
type Condition struct {
	Label string `json:"label"`
	// Job overrides the sweep's job (overhead: reads, then writes).
	Job       string  `json:"job,omitempty"`
	Daemon    bool    `json:"daemon"`
	DelayMs   float64 `json:"delay_ms"`
	Direction string  `json:"direction,omitempty"`
}

// SweepStep is one condition's transfers.
type SweepStep struct {
	Condition
	Seconds []float64 `json:"seconds"`
	MeanS   float64   `json:"mean_s"`
	SES     float64   `json:"se_s"` // standard error of the mean
	MBs     float64   `json:"mb_s"` // the size over the mean time
}

// SweepResult is a sweep's measurements and what they show.
type SweepResult struct {
	Sweep
	Bytes int64       `json:"bytes"`
	Steps []SweepStep `json:"steps"`
	// Monotonic: every delay step took longer than the one before (the
	// daemon's conditions in delay order); Separated: by more than
	// twice the two steps' combined standard error each time.
	Monotonic bool    `json:"monotonic"`
	Separated bool    `json:"separated"`
	Welch     []Welch `json:"welch,omitempty"`
}

// step is the result of one condition's times.
func step(c Condition, secs []float64, bytes int64) SweepStep {
	s := SweepStep{Condition: c, Seconds: secs}
	st := meanVar(secs)
	s.MeanS, s.SES = iolog.Round3(st.mean), roundN(math.Sqrt(st.variance/float64(len(secs))), 5)
	if st.mean > 0 {
		s.MBs = iolog.Round3(float64(bytes) / 1e6 / st.mean)
	}
	return s
}

// sweepLeft estimates how long the transfers not yet made will take, from
// times, the seconds of those made so far per condition (the last one
// possibly incomplete). A transfer under a delay takes longer the larger
// the delay, nearly in proportion (thesis Figs. 5.5–5.6), so a condition
// not reached yet is predicted on the least-squares line through the
// reached conditions' mean times against their delays (those of the same
// job), never below the fastest of them; with fewer than two delays to
// draw it through, by the mean of every transfer so far.
func sweepLeft(sw Sweep, times [][]float64) time.Duration {
	var all []float64
	for _, ts := range times {
		all = append(all, ts...)
	}
	if len(all) == 0 {
		return sw.estimate
	}
	overall := meanVar(all).mean
	predict := func(c Condition) float64 {
		var xs, ys []float64
		for i, ts := range times {
			if len(ts) > 0 && sw.Conditions[i].Job == c.Job {
				xs, ys = append(xs, sw.Conditions[i].DelayMs), append(ys, meanVar(ts).mean)
			}
		}
		if len(xs) < 2 || meanVar(xs).variance == 0 {
			return overall
		}
		alpha, beta := stat.LinearRegression(xs, ys, nil, false)
		return max(alpha+beta*c.DelayMs, slices.Min(ys))
	}
	var left float64
	for i, c := range sw.Conditions {
		if i < len(times) && len(times[i]) > 0 {
			left += float64(max(sw.Repeats-len(times[i]), 0)) * meanVar(times[i]).mean
		} else {
			left += float64(sw.Repeats) * predict(c)
		}
	}
	return time.Duration(left * float64(time.Second))
}

func roundN(x float64, n int) float64 {
	p := math.Pow(10, float64(n))
	return math.Round(x*p) / p
}

// judge sets Monotonic and Separated over the delay steps, and the
// Welch comparisons.
func (r *SweepResult) judge() {
	r.Monotonic, r.Separated = true, true
	var prev *SweepStep
	for i := range r.Steps {
		s := &r.Steps[i]
		if !s.Daemon {
			continue
		}
		if prev != nil && s.DelayMs > prev.DelayMs {
			if !(s.MeanS > prev.MeanS) {
				r.Monotonic = false
			}
			if s.MeanS-prev.MeanS <= 2*math.Hypot(s.SES, prev.SES) {
				r.Separated = false
			}
		}
		prev = s
	}
	r.Welch = nil
	for _, p := range r.Compare {
		a, b := r.stepOf(p[0]), r.stepOf(p[1])
		if a == nil || b == nil {
			continue
		}
		r.Welch = append(r.Welch, welch(p[0], p[1], a.Seconds, b.Seconds, 0.99))
	}
}

func (r *SweepResult) stepOf(label string) *SweepStep {
	for i := range r.Steps {
		if r.Steps[i].Label == label {
			return &r.Steps[i]
		}
	}
	return nil
}

// runSweep runs every condition's transfers in order, starting and
// stopping the observing daemon as the conditions need it.
func (e *env) runSweep(ctx context.Context, sw Sweep) (res *SweepResult, err error) {
	res = &SweepResult{Sweep: sw}
	var d *daemon
	defer func() {
		if d != nil {
			if serr := d.stop(); serr != nil && err == nil {
				err = fmt.Errorf("stopping the daemon: %w", serr)
			}
		}
		os.RemoveAll(ctlSocketDir)
	}()
	total := len(sw.Conditions) * sw.Repeats
	start := time.Now()
	var times [][]float64 // per condition so far, the transfers' seconds
	for i, c := range sw.Conditions {
		if d, err = e.sweepDaemon(ctx, d, c, i); err != nil {
			return res, err
		}
		undo, err := e.sweepThrottle(ctx, sw.Host, c)
		if err != nil {
			return res, err
		}
		times = append(times, nil)
		for rep := range sw.Repeats {
			s, bytes, err := e.transfer(ctx, sw, c, filepath.Join(e.o.Out, fmt.Sprintf("transfer-%02d-%02d.jsonl", i, rep)))
			if err != nil {
				return res, err
			}
			times[i], res.Bytes = append(times[i], s), bytes
			done := i*sw.Repeats + rep + 1
			e.prog.line("%s: %s, transfer %d/%d: %.2f s; %d/%d done, %s elapsed, about %s left", e.prog.x.Name, c.Label, rep+1, sw.Repeats, s,
				done, total, time.Since(start).Round(time.Second), sweepLeft(sw, times).Round(time.Second))
		}
		if err := undo(); err != nil {
			return res, err
		}
		res.Steps = append(res.Steps, step(c, times[i], res.Bytes))
	}
	res.judge()
	return res, nil
}

// sweepDaemon starts the observing daemon for condition c if it needs
// one and none runs, or stops the running one if it does not.
func (e *env) sweepDaemon(ctx context.Context, d *daemon, c Condition, i int) (*daemon, error) {
	switch {
	case c.Daemon && d == nil:
		dir := filepath.Join(e.o.Out, fmt.Sprintf("daemon-%02d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		record, cfgPath := filepath.Join(dir, "daemon-record.jsonl"), filepath.Join(dir, "sanqos.toml")
		if err := os.WriteFile(cfgPath, []byte(daemonConfig(Control{Controller: "none"}, e.o.Gains, e.v, record)), 0o644); err != nil {
			return nil, fmt.Errorf("writing the daemon's configuration: %w", err)
		}
		return startDaemon(ctx, e.o.Sanqos, daemonArgs(cfgPath, record), record, filepath.Join(dir, "daemon.log"))
	case !c.Daemon && d != nil:
		if err := d.stop(); err != nil {
			return nil, fmt.Errorf("stopping the daemon: %w", err)
		}
		return nil, nil
	}
	return d, nil
}

// sweepThrottle sets condition c's delay on host through the daemon and
// returns what frees it. Read delays are exact only with TCP autocorking
// off on the target (see package throttle), so it is off while they are
// set.
func (e *env) sweepThrottle(ctx context.Context, host string, c Condition) (func() error, error) {
	if c.DelayMs <= 0 {
		return func() error { return nil }, nil
	}
	s := Step{Host: host, DelayMs: c.DelayMs, Direction: c.Direction}
	addr := ""
	for _, h := range e.v.hosts {
		if h.name == host {
			addr = h.addr
		}
	}
	restore, err := autocorkOff(ctx, s.direction())
	if err != nil {
		return nil, err
	}
	if err := e.throttleCmd(ctx, throttleArgs(s, addr, e.v.port, true)); err != nil {
		return nil, errors.Join(err, restore())
	}
	return func() error {
		return errors.Join(e.throttleCmd(ctx, throttleArgs(s, addr, e.v.port, false)), restore())
	}, nil
}

func (e *env) throttleCmd(ctx context.Context, args []string) error {
	cmd := lab.Command(ctx, lab.TargetNS, append([]string{e.o.Sanqos}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// autocorkOff turns TCP autocorking off in the target's namespace for a
// read delay, and returns what puts the old value back.
func autocorkOff(ctx context.Context, direction string) (func() error, error) {
	if direction == "write" {
		return func() error { return nil }, nil
	}
	const key = "net.ipv4.tcp_autocorking"
	old, err := lab.Command(ctx, lab.TargetNS, "sysctl", "-n", key).Output()
	if err != nil {
		return nil, fmt.Errorf("reading %s in %s: %w", key, lab.TargetNS, err)
	}
	set := func(v string) error {
		if out, err := lab.Command(context.WithoutCancel(ctx), lab.TargetNS, "sysctl", "-q", "-w", key+"="+v).CombinedOutput(); err != nil {
			return fmt.Errorf("setting %s=%s in %s: %w: %s", key, v, lab.TargetNS, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := set("0"); err != nil {
		return nil, err
	}
	return func() error { return set(strings.TrimSpace(string(old))) }, nil
}

// transferArgs are the load generator's arguments for one transfer.
func transferArgs(sw Sweep, c Condition) []string {
	job := sw.Job
	if c.Job != "" {
		job = c.Job
	}
	args := []string{"--job", job, "--size", sw.Size, "--name", "transfer"}
	if sw.BS != "" {
		args = append(args, "--bs", sw.BS)
	}
	return args
}

// transfer runs one transfer of the sweep and returns the seconds its I/O
// took (from the load generator's summary: the first I/O's issue to the
// last completion, the sessions' logins left out) and its bytes.
func (e *env) transfer(ctx context.Context, sw Sweep, c Condition, logPath string) (float64, int64, error) {
	cmd, err := e.l.LoadCommand(ctx, sw.Host, transferArgs(sw, c)...)
	if err != nil {
		return 0, 0, err
	}
	out, err := cmd.Output()
	if werr := os.WriteFile(logPath, out, 0o644); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return 0, 0, fmt.Errorf("transfer on %s: %w", sw.Host, err)
	}
	recs, err := iolog.ReadRecords(bufio.NewReader(strings.NewReader(string(out))))
	if err != nil {
		return 0, 0, fmt.Errorf("reading the transfer's log %s: %w", logPath, err)
	}
	s, ok := iolog.Summary(recs, "")
	if !ok || s.Dur <= 0 || s.Bytes <= 0 {
		return 0, 0, fmt.Errorf("the transfer's log %s has no summary with a duration", logPath)
	}
	return s.Dur, s.Bytes, nil
}

// sizeUnits are the load generator's size suffixes: powers of 1024, as in
// fio.
var sizeUnits = []struct {
	suffix, label string
	mult          int64
}{{"k", " KiB", 1 << 10}, {"m", " MiB", 1 << 20}, {"g", " GiB", 1 << 30}}

// parseSize splits a load generator's size ("200m") into its number and
// unit; ok is false when it cannot read it.
func parseSize(s string) (n, mult int64, label string, ok bool) {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			num, mult, label = strings.TrimSuffix(s, u.suffix), u.mult, u.label
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, mult, label, err == nil
}

// sizeBytes reads the load generator's sizes; 0 when it cannot.
func sizeBytes(s string) int64 {
	n, mult, _, ok := parseSize(s)
	if !ok {
		return 0
	}
	return n * mult
}

// sizeLabel writes a load generator's size for people: "200m" is
// "200 MiB"; what it cannot read, or a size in bytes, stays as it is.
func sizeLabel(s string) string {
	n, _, label, ok := parseSize(s)
	if !ok || label == "" {
		return s
	}
	return strconv.FormatInt(n, 10) + label
}

// plotSweep draws a transfer sweep: the mean time of each condition with
// its standard error, and the MB/s. Delay sweeps (fig5.5, fig5.6) put the
// delay on the X axis; the overhead's conditions are numbered, one series
// each so the legend names them.
func plotSweep(s *Summary, runs []*RunResult) ([]string, error) {
	r := s.Sweep
	if r == nil || len(r.Steps) == 0 {
		return nil, nil
	}
	timeP := plot.Panel{Title: fmt.Sprintf("time to move %s (mean of %d, bars: standard error)", sizeLabel(r.Size), r.Repeats), YLabel: "s"}
	rateP := plot.Panel{Title: "throughput (size / mean time)", YLabel: "MB/s"}
	xlabel := "added delay (ms)"
	if len(r.Compare) > 0 {
		xlabel = "condition"
		for i, st := range r.Steps {
			x := []float64{float64(i + 1)}
			timeP.Points = append(timeP.Points, plot.Series{Name: st.Label, X: x, Y: []float64{st.MeanS}, YErr: []float64{st.SES}})
			rateP.Points = append(rateP.Points, plot.Series{Name: st.Label, X: x, Y: []float64{st.MBs}})
		}
	} else {
		var x, t, se, mbs []float64
		for _, st := range r.Steps {
			x, t, se, mbs = append(x, st.DelayMs), append(t, st.MeanS), append(se, st.SES), append(mbs, st.MBs)
		}
		timeP.Series = []plot.Series{{Name: "mean time", X: x, Y: t, YErr: se}}
		rateP.Series = []plot.Series{{Name: "MB/s", X: x, Y: mbs}}
	}
	name := s.Experiment + ".png"
	if err := plot.Stacked(filepath.Join(s.outDir(runs), name), s.Experiment+": "+s.Title, xlabel, []plot.Panel{timeP, rateP}); err != nil {
		return nil, err
	}
	return []string{name}, nil
}
