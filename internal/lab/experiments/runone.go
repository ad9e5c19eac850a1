package experiments

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// run is one run of an experiment in progress: a workload under a control.
type run struct {
	e      *env
	w      Workload
	c      Control
	dir    string
	res    *RunResult
	t0     time.Time // the loads' common start
	procs  []*loadProc
	d      *daemon // nil without a controller
	record string  // the daemon's --record file
	refMs  float64 // the threshold an uncontrolled run is judged against
}

// runOne runs a workload under a control and analyses it. refMs is the
// threshold an uncontrolled run's over_threshold_pct is measured against.
func (e *env) runOne(ctx context.Context, name string, w Workload, c Control, refMs float64) (res *RunResult, err error) {
	r := &run{e: e, w: w, c: c, dir: filepath.Join(e.o.Out, name), refMs: refMs}
	if err := validateSchedule(c.Schedule, w.Total, e.v.hostNames()); err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", r.dir, err)
	}
	r.res = newRunResult(name, w, c, refMs, r.dir, e.o.Gains)
	r.record = filepath.Join(r.dir, "daemon-record.jsonl")
	r.t0 = time.Now().Add(c.startSlack()).Truncate(time.Second).Add(time.Second)
	namespaces := []string{lab.TargetNS}
	for _, h := range e.v.hosts {
		namespaces = append(namespaces, h.ns)
	}
	before, err := e.count.Counters(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	// Over NFS the reader's blocks of the run before are in the server's
	// page cache; every run must start from the disk.
	if err := e.l.DropNFSCache(); err != nil {
		return nil, err
	}
	defer r.stopLoads()
	if err := r.startLoads(ctx); err != nil {
		return nil, err
	}
	if c.Controller != "" {
		serr := r.startController(ctx)
		if r.d != nil {
			defer func() {
				if serr := r.d.stop(); serr != nil && err == nil {
					err = fmt.Errorf("stopping the daemon: %w", serr)
				}
				os.RemoveAll(ctlSocketDir)
			}()
		}
		if serr != nil {
			return nil, serr
		}
	}
	sched := r.startSchedule(ctx)
	samples, err := r.waitLoads(ctx)
	if err != nil {
		return nil, err
	}
	if err := sched(); err != nil {
		return nil, err
	}
	if err := r.countRetransmits(ctx, namespaces, before, samples); err != nil {
		return nil, err
	}
	if err := r.checkComplete(); err != nil {
		return nil, err
	}
	if err := r.analyze(samples); err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(r.dir, "result.json"), r.res); err != nil {
		return nil, err
	}
	return r.res, nil
}

// newRunResult is the result's description before anything is measured.
func newRunResult(name string, w Workload, c Control, refMs float64, dir string, g Gains) *RunResult {
	res := &RunResult{Name: name, Controller: c.Controller, Policy: c.Policy, Writers: w.Writers, Workload: w,
		Dir: dir, OverRefMs: refMs, WriterUnit: "thread", Group: w.Name}
	if c.Controller == "" {
		res.Controller = "none"
	}
	if c.Controller != "" && c.Controller != "none" {
		th := c.ThresholdMs
		res.ThresholdMs = &th
		res.OverRefMs = th
		if c.Controller == "pid" {
			res.UMaxMs = c.uMaxMs(g)
		}
	}
	return res
}

// stopLoads asks every load still running to stop (on an error path;
// the lab's Down would kill them anyway, but a clean logout keeps tgtd
// tidy).
func (r *run) stopLoads() {
	for _, p := range r.procs {
		select {
		case err := <-p.done:
			p.done <- err
		default:
			_ = p.cmd.Process.Signal(os.Interrupt)
		}
	}
}

// startAt is the load generators' --start-at for off after t0.
func (r *run) startAt(off time.Duration) string {
	return strconv.FormatFloat(float64(r.t0.Add(off).UnixNano())/1e9, 'f', 3, 64)
}

func (r *run) start(ctx context.Context, h labHost, file string, args ...string) error {
	p, err := r.e.startLoad(ctx, h, filepath.Join(r.dir, file), args...)
	if err != nil {
		return err
	}
	r.procs = append(r.procs, p)
	r.res.Commands = append(r.res.Commands, strings.Join(p.cmd.Args, " "))
	return nil
}

// readers is how many readers the workload runs (at least one).
func (w Workload) readers() int { return max(w.Readers, 1) }

// readerJob is the readers' load generator preset.
func (w Workload) readerJob() string {
	if w.Reader == "" {
		return "smalljob"
	}
	return w.Reader
}

// startLoads starts the readers and the writers; they wait for t0.
func (r *run) startLoads(ctx context.Context) error {
	w := r.w
	if err := r.startReaders(ctx); err != nil {
		return err
	}
	if w.Writers == 0 {
		return nil
	}
	writers := r.e.v.writers
	if w.TurnReader > 0 {
		writers = writers[1:] // the first is the second reader
	}
	lunSize := r.e.l.State().Size
	for i, n := range spread(w.Writers, len(writers)) {
		if n == 0 {
			continue
		}
		h := writers[i]
		region := lunSize / int64(n) / (1 << 20) // MiB per thread
		if r.e.v.nfs {
			region = lab.NFSWriterSize >> 20 // a file per thread, laid out by the lab
		}
		args := append(writerArgs(w, h.name, n, region), "--start-at", r.startAt(w.Lead), "--quiet")
		if err := r.start(ctx, h, "writers-"+h.name+".jsonl", args...); err != nil {
			return err
		}
	}
	return nil
}

// startReaders starts the readers: one on each of the first Readers
// hosts for the whole run (time-based: a job runs the whole run, over
// its region again if it gets to the end; fig5.4's free writer moves its
// 2 GiB in two minutes of the schedule's 3.5), or two that take turns.
func (r *run) startReaders(ctx context.Context) error {
	w := r.w
	if w.TurnReader > 0 {
		turn, err := turnReaderArgs(w.readerJob(), w.TurnReader)
		if err != nil {
			return err
		}
		for i, h := range r.e.v.hosts[:2] {
			args := append([]string{"--job", w.readerJob(), "--name", "reader-" + h.name, "--runtime", w.Total.String(),
				"--start-at", r.startAt(time.Duration(i) * w.TurnReader), "--quiet"}, turn...)
			if err := r.start(ctx, h, "reader-"+h.name+".jsonl", args...); err != nil {
				return err
			}
		}
		return nil
	}
	for i := 0; i < w.readers(); i++ {
		h := r.e.v.hosts[i]
		if err := r.start(ctx, h, "reader-"+h.name+".jsonl", "--job", w.readerJob(), "--name", "reader-"+h.name,
			"--runtime", w.Total.String(), "--time-based", "--start-at", r.startAt(0), "--quiet"); err != nil {
			return err
		}
	}
	return nil
}

// writerArgs are the load generator's arguments for n writer threads on
// host, each over its own region of regionMiB. The writers run for the
// whole WriterTime, over their region again when they get to its end
// (time-based): fig5.8's 12 writers got through 4 GiB in 322 of their
// 440 s, and the seconds after would have passed for unthrottled ones.
// With On they write in bursts, which repeat until the runtime anyway.
func writerArgs(w Workload, host string, n int, regionMiB int64) []string {
	args := []string{"--job", w.writerJob(), "--name", "writers-" + host, "--threads", strconv.Itoa(n),
		"--size", strconv.FormatInt(regionMiB, 10) + "m", "--per-thread", "--runtime", w.WriterTime.String()}
	if w.WriterDepth > 1 {
		args = append(args, "--iodepth", strconv.Itoa(w.WriterDepth))
	}
	if w.WriterFsync > 0 {
		args = append(args, "--fsync", strconv.Itoa(w.WriterFsync))
	}
	if w.On != "" {
		return append(args, "--on", w.On, "--off", w.Off.String())
	}
	return append(args, "--time-based")
}

// startController starts the daemon once the load generators have logged
// in (they wait for t0): its first discovery then sees every session,
// which the manual policy needs to resolve its consumers, and it records
// its first ticks before t0. A fixed delay is set before t0, so that the
// writers start with it in force.
func (r *run) startController(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(loginSlack):
	}
	cfgPath := filepath.Join(r.dir, "sanqos.toml")
	if err := os.WriteFile(cfgPath, []byte(daemonConfig(r.c, r.e.o.Gains, r.e.v, r.record)), 0o644); err != nil {
		return fmt.Errorf("writing the daemon's configuration: %w", err)
	}
	d, err := startDaemon(ctx, r.e.o.Sanqos, daemonArgs(cfgPath, r.record), r.record, filepath.Join(r.dir, "daemon.log"))
	if err != nil {
		return err
	}
	r.d = d
	r.res.Commands = append(r.res.Commands, strings.Join(d.argv, " "))
	if r.c.FixedDelayMs > 0 {
		cmds, err := setFixedDelay(ctx, r.e.o.Sanqos, r.e.v, r.c.FixedDelayMs)
		if err != nil {
			return err
		}
		r.res.Commands = append(r.res.Commands, cmds...)
		r.res.FixedDelayMs = r.c.FixedDelayMs
	}
	return nil
}

// startSchedule runs the control's schedule beside the loads; the
// function returned waits for it and stores what took effect.
func (r *run) startSchedule(ctx context.Context) func() error {
	if len(r.c.Schedule) == 0 || r.d == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		a, err := r.runSchedule(ctx, r.c.Schedule)
		r.res.Schedule = a
		done <- err
	}()
	return func() error { return <-done }
}

// waitLoads waits for every load, showing progress, while sampling the
// hosts' TCP counters to place retransmissions in time.
func (r *run) waitLoads(ctx context.Context) ([]tcpSample, error) {
	var nsProcs []nsProc
	for _, p := range r.procs {
		nsProcs = append(nsProcs, nsProc{host: p.host, ns: p.ns, pid: p.cmd.Process.Pid})
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	sampled := make(chan []tcpSample, 1)
	go func() { sampled <- sampleTCP(sampleCtx, nsProcs, r.t0) }()

	end := r.t0.Add(r.w.Total)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	waitErr := make(chan error, 1)
	go func() {
		var errs []error
		for _, p := range r.procs {
			if err := p.wait(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		waitErr <- errors.Join(errs...)
	}()
	for done := false; !done; {
		select {
		case err := <-waitErr:
			if err != nil {
				return nil, err
			}
			done = true
		case <-tick.C:
			r.e.prog.update(time.Until(end))
		}
	}
	stopSampling()
	samples := <-sampled
	if err := writeSamples(filepath.Join(r.dir, "tcp-samples.jsonl"), samples); err != nil {
		return nil, err
	}
	return samples, nil
}

// countRetransmits stores the run's TCP counters and its retransmissions
// by namespace. The daemon records the release after the writers' last
// stop: the reader ran on after them, so the record already covers it.
func (r *run) countRetransmits(ctx context.Context, namespaces []string, before map[string]map[string]int64, samples []tcpSample) error {
	res := r.res
	res.StealMs = stealDuring(samples)
	after, err := r.e.count.Counters(ctx, namespaces)
	if err != nil {
		return err
	}
	diff := counterDiff(before, after)
	if err := writeJSON(filepath.Join(r.dir, "tcp-counters.json"), diff); err != nil {
		return err
	}
	res.RetransmitsBy = counter(diff, "TcpRetransSegs")
	res.LossProbesBy = counter(diff, "TcpExtTCPLossProbes")
	res.RTOsBy = counter(diff, "TcpExtTCPTimeouts")
	res.DSACKsBy = counter(diff, "TcpExtTCPDSACKRecvSegs")
	for ns, n := range res.RetransmitsBy {
		if ns != lab.TargetNS {
			res.Retransmits += n
		}
	}
	return nil
}

// checkComplete refuses a run that was cut short (a load generator killed
// from outside, the lab taken down under it): it must not pass for a
// measurement.
func (r *run) checkComplete() error {
	for _, p := range r.procs {
		recs, err := p.records()
		if err != nil {
			return err
		}
		want := r.w.Total
		if !strings.HasPrefix(filepath.Base(p.log), "reader-") {
			want = r.w.WriterTime
		}
		s, ok := iolog.Summary(recs, "")
		if !ok || s.T < 0.95*want.Seconds() {
			return fmt.Errorf("the load on %s ran %.0f s of %s: it was stopped from outside (was the lab taken down?); see %s",
				p.host, s.T, want, p.errf)
		}
	}
	return nil
}
