package experiments

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/plot"
)

// Step is one window of a timed throttle schedule, what the thesis did
// with `at` jobs (§5.2–5.4): from At to Until after the loads' start the
// initiator Host gets a delay (DelayMs, in Direction) or a read rate cap
// (RateMBs), set and freed through the run's daemon's control socket
// exactly as 'sanqos throttle' does.
type Step struct {
	Host      string        `json:"host"`
	At        time.Duration `json:"at"`
	Until     time.Duration `json:"until"`
	DelayMs   float64       `json:"delay_ms,omitempty"`
	RateMBs   float64       `json:"rate_mb_s,omitempty"`
	Direction string        `json:"direction,omitempty"`
}

// label says what the step does, for legends.
func (s Step) label() string {
	if s.RateMBs > 0 {
		return fmt.Sprintf("%s capped at %g MB/s", s.Host, s.RateMBs)
	}
	return fmt.Sprintf("%s %s delay %g ms", s.Host, s.direction(), s.DelayMs)
}

func (s Step) direction() string {
	if s.RateMBs > 0 {
		return "read"
	}
	if s.Direction == "" {
		return "write"
	}
	return s.Direction
}

// Applied is a step as it happened: when its set and free commands
// returned, in seconds after the loads' start.
type Applied struct {
	Step
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
}

// validateSchedule checks a schedule against its run: windows inside the
// run, one kind of throttle each, hosts of the lab, and no host in two
// windows at once (a consumer has one manual throttle at a time).
func validateSchedule(steps []Step, total time.Duration, hosts []string) error {
	for i, s := range steps {
		switch {
		case !slices.Contains(hosts, s.Host):
			return fmt.Errorf("schedule step %d: host %q is not one of %s", i, s.Host, strings.Join(hosts, ", "))
		case s.At < 0 || s.Until <= s.At || s.Until > total:
			return fmt.Errorf("schedule step %d: window %v..%v is not inside the run's 0..%v", i, s.At, s.Until, total)
		case (s.DelayMs > 0) == (s.RateMBs > 0):
			return fmt.Errorf("schedule step %d: give a delay or a rate, one of them", i)
		case s.RateMBs > 0 && s.Direction != "" && s.Direction != "read":
			return fmt.Errorf("schedule step %d: a rate caps reads only", i)
		}
		for j, o := range steps[:i] {
			if o.Host == s.Host && s.At < o.Until && o.At < s.Until {
				return fmt.Errorf("schedule steps %d and %d throttle %s at the same time", j, i, s.Host)
			}
		}
	}
	return nil
}

// needsRates reports whether a schedule caps rates (the daemon then needs
// an htb data path beside its delays).
func needsRates(steps []Step) bool {
	return slices.ContainsFunc(steps, func(s Step) bool { return s.RateMBs > 0 })
}

// scheduleEvent is one command of a schedule at its time.
type scheduleEvent struct {
	at   time.Duration
	step int
	set  bool // set the throttle, else free it
}

// events orders the schedule's sets and frees in time; at one instant
// frees come first, so a host moved from one window into the next is
// free when the next is set.
func events(steps []Step) []scheduleEvent {
	var ev []scheduleEvent
	for i, s := range steps {
		ev = append(ev, scheduleEvent{s.At, i, true}, scheduleEvent{s.Until, i, false})
	}
	slices.SortStableFunc(ev, func(a, b scheduleEvent) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		if a.set == b.set {
			return 0
		}
		if a.set {
			return 1
		}
		return -1
	})
	return ev
}

// throttleArgs are 'sanqos throttle' arguments that set or free s on ip.
func throttleArgs(s Step, ip string, port int, set bool) []string {
	args := []string{"throttle", "--socket", filepath.Join(ctlSocketDir, "ctl.sock"), "--ip", ip}
	switch {
	case !set:
		return append(args, "--free")
	case s.RateMBs > 0:
		return append(args, "--rate", strconv.FormatFloat(s.RateMBs, 'f', -1, 64)+"MB/s", "--port", strconv.Itoa(port))
	}
	return append(args, "--delay", strconv.FormatFloat(s.DelayMs, 'f', -1, 64)+"ms",
		"--direction", s.direction(), "--port", strconv.Itoa(port))
}

// runSchedule sets and frees the steps at their times after t0, through
// the daemon, and returns when each took effect; it stops at ctx's end.
func (r *run) runSchedule(ctx context.Context, steps []Step) ([]Applied, error) {
	addr := map[string]string{}
	for _, h := range r.e.v.hosts {
		addr[h.name] = h.addr
	}
	applied := make([]Applied, len(steps))
	for i, s := range steps {
		applied[i] = Applied{Step: s, FromS: -1, ToS: -1}
	}
	for _, ev := range events(steps) {
		select {
		case <-ctx.Done():
			return applied, ctx.Err()
		case <-time.After(time.Until(r.t0.Add(ev.at))):
		}
		s := steps[ev.step]
		cmd := lab.Command(ctx, lab.TargetNS, append([]string{r.e.o.Sanqos}, throttleArgs(s, addr[s.Host], r.e.v.port, ev.set)...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return applied, fmt.Errorf("schedule: %s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
		}
		at := time.Since(r.t0).Seconds()
		if ev.set {
			applied[ev.step].FromS = at
		} else {
			applied[ev.step].ToS = at
		}
		r.res.Commands = append(r.res.Commands, strings.Join(cmd.Args, " "))
	}
	return applied, nil
}

// spans are the applied steps as shaded windows, coloured like their
// host's series (hosts in the order the plot draws them).
func spans(applied []Applied, hosts []string) []plot.Span {
	var out []plot.Span
	for _, a := range applied {
		if a.FromS < 0 || a.ToS < a.FromS {
			continue
		}
		out = append(out, plot.Span{From: a.FromS, To: a.ToS, Label: a.label(), Color: slices.Index(hosts, a.Host)})
	}
	return out
}

// plotSchedule draws fig5.2–5.4: per run, each initiator's MB/s over
// time, the windows of the schedule shaded in the colour of the host
// they throttled.
func plotSchedule(s *Summary, runs []*RunResult) ([]string, error) {
	var panels []plot.Panel
	for _, r := range runs {
		hosts := make([]string, 0, len(r.timeline.HostMBs))
		for h := range r.timeline.HostMBs {
			hosts = append(hosts, h)
		}
		slices.Sort(hosts)
		p := plot.Panel{Title: r.Name + ": MB/s per initiator, throttled windows shaded", YLabel: "MB/s", Spans: spans(r.Schedule, hosts)}
		for _, h := range hosts {
			p.Series = append(p.Series, plot.Series{Name: h, X: r.timeline.T, Y: r.timeline.HostMBs[h]})
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil, nil
	}
	name := s.Experiment + ".png"
	if err := plot.Stacked(filepath.Join(s.outDir(runs), name), s.Experiment+": "+s.Title, xLabel, panels); err != nil {
		return nil, err
	}
	return []string{name}, nil
}

// Effect is what one applied step did: the throttled host's mean MB/s in
// the window of the same length before it and during it, the other
// hosts' together, and how many seconds after the set its 1-second rate
// first came down to the window's level (within a fifth of the way from
// it to before; -1: never). The nfqueue backend raises a flow's delay
// over a few hundred milliseconds (see throttle's rise limit), so the
// drop is not a step.
type Effect struct {
	Host             string  `json:"host"`
	SetAtS           float64 `json:"set_at_s"`
	BeforeMBs        float64 `json:"before_mb_s"`
	DuringMBs        float64 `json:"during_mb_s"`
	OthersBeforeMBs  float64 `json:"others_before_mb_s"`
	OthersDuringMBs  float64 `json:"others_during_mb_s"`
	DropAfterSeconds float64 `json:"down_after_s"`
}

// scheduleEffects measures each applied step on the per-second timeline.
// The window's first second is left out of both means: it is the step.
func scheduleEffects(tl Timeline, applied []Applied) []Effect {
	var out []Effect
	for _, a := range applied {
		if a.FromS < 0 || a.ToS <= a.FromS {
			continue
		}
		win := a.ToS - a.FromS
		e := Effect{Host: a.Host, SetAtS: a.FromS, DropAfterSeconds: -1}
		var nb, nd int
		for i, t := range tl.T {
			in := t > a.FromS+1 && t <= a.ToS
			before := t > a.FromS-win+1 && t <= a.FromS
			for h, mbs := range tl.HostMBs {
				switch {
				case in && h == a.Host:
					e.DuringMBs += mbs[i]
				case in:
					e.OthersDuringMBs += mbs[i]
				case before && h == a.Host:
					e.BeforeMBs += mbs[i]
				case before:
					e.OthersBeforeMBs += mbs[i]
				}
			}
			if in {
				nd++
			}
			if before {
				nb++
			}
		}
		if nb == 0 || nd == 0 {
			continue
		}
		e.BeforeMBs, e.OthersBeforeMBs = e.BeforeMBs/float64(nb), e.OthersBeforeMBs/float64(nb)
		e.DuringMBs, e.OthersDuringMBs = e.DuringMBs/float64(nd), e.OthersDuringMBs/float64(nd)
		for i, t := range tl.T {
			if t > a.FromS && t <= a.ToS && tl.HostMBs[a.Host][i] <= e.DuringMBs+(e.BeforeMBs-e.DuringMBs)/5 {
				e.DropAfterSeconds = t - a.FromS
				break
			}
		}
		out = append(out, e)
	}
	return out
}

// mechanismChecks are the targets of the mechanism's experiments: equal
// readers share equally (fig5.1), each
// window of a schedule slows its host within 1 s and the others gain
// (fig5.2–5.4; 1 s bins, so 2 s), a delay sweep's times rise step by
// step beyond their noise (fig5.5, fig5.6), and the idle daemon costs
// nothing measurable (overhead).
func mechanismChecks(s *Summary) []Check {
	var out []Check
	for _, r := range s.Runs {
		if s.Experiment == "fig5.1" {
			// fig5.1: equal readers share the disk equally.
			out = append(out, Check{r.Name, "Jain's index over the equal readers' MB/s", "≥ 0.95", fmt.Sprintf("%.3f", r.Jain), r.Jain >= 0.95})
		}
		for _, e := range r.ScheduleEffects {
			what := fmt.Sprintf("%s throttled at %.0f s", e.Host, e.SetAtS)
			out = append(out,
				Check{r.Name, what + ": its MB/s down to the window's level", "within 2 s (1 s bins)", fmt.Sprintf("%.1f s (%.1f → %.1f MB/s)", e.DropAfterSeconds, e.BeforeMBs, e.DuringMBs),
					e.DropAfterSeconds >= 0 && e.DropAfterSeconds <= 2},
				Check{r.Name, what + ": the others' MB/s", "rise", fmt.Sprintf("%.1f → %.1f MB/s", e.OthersBeforeMBs, e.OthersDuringMBs),
					e.OthersDuringMBs > e.OthersBeforeMBs})
		}
	}
	if sw := s.Sweep; sw != nil && len(sw.Compare) == 0 {
		out = append(out, Check{"sweep", "time rises with every delay step", "monotonic, steps apart by > 2 standard errors",
			fmt.Sprintf("monotonic %v, separated %v", sw.Monotonic, sw.Separated), sw.Monotonic && sw.Separated})
	}
	if sw := s.Sweep; sw != nil {
		for _, w := range sw.Welch {
			if b := sw.stepOf(w.B); b == nil || b.DelayMs > 0 {
				continue // a delay class is reported, not held to zero
			}
			out = append(out, Check{"sweep", fmt.Sprintf("%s against %s", w.B, w.A), "difference not distinguishable from 0 at 99 %",
				fmt.Sprintf("%+.2f %% (%+.2f … %+.2f %%)", w.DiffPct, w.CILowPct, w.CIHighPct), !w.Distinguishable})
		}
	}
	return out
}
