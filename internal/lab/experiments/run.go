package experiments

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/lab/iolog"
)

// labHost is one initiator of the lab as a run sees it.
type labHost struct {
	name, ns, addr, loop, iqn string
}

// labView is what a run needs to know of the lab: the target's ports, the
// reader (b2) and the writer hosts (b3–b5).
type labView struct {
	port, controlPort int
	reader            labHost
	writers           []labHost
	hosts             []labHost // every initiator, b2 first
}

func viewOf(l *lab.Lab) (labView, error) {
	v := labView{port: l.Target().Port, controlPort: l.Target().ControlPort}
	for _, in := range l.Initiators() {
		h := labHost{name: in.Name, ns: in.NS, addr: in.IP.String(), loop: in.Loop, iqn: in.IQN}
		v.hosts = append(v.hosts, h)
	}
	if len(v.hosts) < 4 {
		return v, fmt.Errorf("the lab has %d initiators; the experiments need b2 to b5", len(v.hosts))
	}
	v.reader, v.writers = v.hosts[0], v.hosts[1:]
	return v, nil
}

func (v labView) writerAddrs() []string {
	var out []string
	for _, w := range v.writers {
		out = append(out, w.addr)
	}
	return out
}

// Workload is the load of one run: smalljob on b2 for Total, and Writers
// sequential 64 KiB writer threads spread over b3–b5 from Lead on for
// WriterTime, continuously or, with On, in bursts of On bytes per thread
// separated by Off.
type Workload struct {
	Total      time.Duration `json:"total"`
	Lead       time.Duration `json:"lead"`
	WriterTime time.Duration `json:"writer_time"`
	Writers    int           `json:"writers"`
	On         string        `json:"on,omitempty"`
	Off        time.Duration `json:"off,omitempty"`
	// Reader is the reader's preset; "" is smalljob. Readers > 1 runs
	// it on that many hosts from b2 on (fig5.1), with no writers.
	Reader  string `json:"reader,omitempty"`
	Readers int    `json:"readers,omitempty"`
	// Name names the workload in an experiment of several (guarantees):
	// runs of the same workload are compared with its uncontrolled run.
	Name string `json:"name,omitempty"`
	// WriterJob is the writers' preset; "" is seqwrite-64k (the
	// thesis's). randw uses randwrite-8k.
	WriterJob string `json:"writer_job,omitempty"`
}

// writerJob is the writers' preset.
func (w Workload) writerJob() string {
	if w.WriterJob == "" {
		return "seqwrite-64k"
	}
	return w.WriterJob
}

// spread splits n writer threads over hosts as evenly as possible, the
// first hosts getting the remainder (1 → b3; 3 → one each; 12 → four each).
func spread(n, hosts int) []int {
	out := make([]int, hosts)
	for i := range out {
		out[i] = n / hosts
		if i < n%hosts {
			out[i]++
		}
	}
	return out
}

// RunResult is one run of an experiment; the JSON field names are the
// schema of summary.json's runs.
type RunResult struct {
	Name        string   `json:"name"`
	Controller  string   `json:"controller"`
	Policy      string   `json:"policy,omitempty"`
	ThresholdMs *float64 `json:"threshold_ms"`
	// UMaxMs is the pid controller's largest delay in this run (0 for
	// other controllers).
	UMaxMs   float64  `json:"u_max_ms,omitempty"`
	Writers  int      `json:"writers"`
	Workload Workload `json:"workload"`
	// WaitMs summarises smalljob's 1-second mean wait over the seconds
	// with writers active.
	WaitMs        Stats `json:"wait_ms"`
	ActiveSeconds int   `json:"active_seconds"`
	// OverThresholdPct is the share of those seconds above OverFactor ×
	// OverRefMs: the run's threshold, or for an uncontrolled run the
	// experiment's reference threshold.
	OverThresholdPct float64 `json:"over_threshold_pct"`
	OverRefMs        float64 `json:"over_threshold_ref_ms"`
	// WriteMBs is the writers' aggregate MB/s averaged over the seconds
	// they were active.
	WriteMBs float64 `json:"write_mb_s"`
	// Retransmits is TcpRetransSegs over every initiator namespace;
	// RetransmitsBy has each namespace, the target's too.
	Retransmits   int64            `json:"retransmits"`
	RetransmitsBy map[string]int64 `json:"retransmits_by_namespace"`
	// LossProbesBy (TcpExtTCPLossProbes) and RTOsBy (TcpExtTCPTimeouts)
	// say which timer sent the retransmissions: a tail loss probe fires
	// after about 2 × SRTT without an ACK, an RTO after 200 ms or more.
	// Every counter that moved is in the run's tcp-counters.json.
	LossProbesBy map[string]int64 `json:"loss_probes_by_namespace"`
	RTOsBy       map[string]int64 `json:"rtos_by_namespace"`
	// DSACKsBy (TcpExtTCPDSACKRecvSegs) counts retransmitted segments the
	// receiver reported as duplicates: segments that had not been lost.
	// It is in segments like RetransmitsBy; a loss probe may resend more
	// than one segment, so LossProbesBy (events) can be smaller.
	DSACKsBy map[string]int64 `json:"dsacks_by_namespace"`
	// RetransmitEvents are the seconds in which an initiator
	// retransmitted, sampled once a second (tcp-samples.jsonl), beside
	// the hypervisor's steal time and the daemon's late holds of that
	// second; StealMs is the steal time of the whole run.
	RetransmitEvents []RetransmitEvent `json:"retransmit_events"`
	StealMs          float64           `json:"steal_ms"`
	// Takeovers counts the times the daemon's standby thread ran the
	// packet path during the run because the packet thread had stalled.
	Takeovers uint64 `json:"standby_takeovers"`
	// ReaderKBs is smalljob's kB/s over the active seconds; ReaderGoalKBs
	// what it asks for.
	ReaderKBs     float64 `json:"reader_kb_s"`
	ReaderGoalKBs float64 `json:"reader_goal_kb_s"`
	// WriterMBs is each writer thread's MB/s over its whole run
	// (WriterUnit "thread"), named in WriterNames (host/thread).
	WriterMBs   []float64 `json:"writer_mb_s"`
	WriterUnit  string    `json:"writer_unit"`
	WriterNames []string  `json:"writer_names"`
	Jain        float64   `json:"jain"`
	// MaxWriteIOMs is the longest single write I/O of any writer.
	MaxWriteIOMs float64 `json:"max_write_io_ms"`
	// Bursts is smalljob's wait in each burst of the writers: peak,
	// seconds over, settle time (see Burst).
	Bursts *BurstSummary `json:"bursts,omitempty"`
	// Guarantees are what the source reports' guarantees are checked on.
	Guarantees *Guarantees `json:"guarantees,omitempty"`
	// Group names the workload a run belongs to in an experiment of
	// several (guarantees); its controlled runs are compared with its
	// uncontrolled one.
	Group string `json:"group,omitempty"`
	// FixedDelayMs is the fixed write delay of a frontier run.
	FixedDelayMs float64 `json:"fixed_delay_ms,omitempty"`
	// Delay and Release come from the daemon's record.
	Delay *DelayStats `json:"delay_ms,omitempty"`
	// SignalHold, for a run that names its signal, is how well the daemon
	// held that signal (as it measured it) under the threshold.
	SignalHold *SignalHold     `json:"signal_hold,omitempty"`
	Release    *ReleaseSummary `json:"release,omitempty"`
	// ReadersMBs is each reader's MB/s (fig5.1).
	ReadersMBs map[string]float64 `json:"readers_mb_s,omitempty"`
	// Dir holds the run's raw logs; Commands are what was run.
	Dir      string   `json:"dir"`
	Commands []string `json:"commands"`

	timeline Timeline
	ticks    []Tick
}

// env is one experiment in progress on a lab.
type env struct {
	l     *lab.Lab
	v     labView
	o     Options
	count retransCounter
	prog  *progress
}

// loadProc is one load generator writing its log to a file.
type loadProc struct {
	host string
	ns   string // the host's network namespace
	cmd  *exec.Cmd
	log  string
	errf string
	done chan error
	// fullBytes is what the load moves when it completes its region
	// before its runtime (0: it runs for its runtime).
	fullBytes int64
}

// startLoad starts a load generator; fullBytes is what it moves when it
// completes its region (0: it runs for its runtime).
func (e *env) startLoad(ctx context.Context, host labHost, logPath string, fullBytes int64, args ...string) (*loadProc, error) {
	cmd, err := e.l.LoadCommand(context.WithoutCancel(ctx), host.name, args...)
	if err != nil {
		return nil, err
	}
	out, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", logPath, err)
	}
	errPath := strings.TrimSuffix(logPath, ".jsonl") + ".stderr"
	errf, err := os.Create(errPath)
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("creating %s: %w", errPath, err)
	}
	cmd.Stdout, cmd.Stderr = out, errf
	if err := cmd.Start(); err != nil {
		out.Close()
		errf.Close()
		return nil, fmt.Errorf("starting load on %s: %w", host.name, err)
	}
	p := &loadProc{host: host.name, ns: host.ns, cmd: cmd, log: logPath, errf: errPath, done: make(chan error, 1), fullBytes: fullBytes}
	go func() { p.done <- cmd.Wait(); out.Close(); errf.Close() }()
	return p, nil
}

// wait waits for the load to end; on ctx cancellation it asks for a clean
// stop (sessions log out) with SIGINT rather than a kill, which would leave
// tgtd holding a stale session.
func (p *loadProc) wait(ctx context.Context) error {
	var err error
	select {
	case err = <-p.done:
	case <-ctx.Done():
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case err = <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			err = <-p.done
		}
		return ctx.Err()
	}
	if err != nil {
		msg, _ := os.ReadFile(p.errf)
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			// A usage error: its first line says what, the rest is the
			// flag list. The lab passes only flags it knows the load
			// generator has, so the binary is from another build.
			first, _, _ := strings.Cut(strings.TrimSpace(string(msg)), "\n")
			return fmt.Errorf("load on %s: %s refused its arguments (%s): is it from another build of sanqos? Run 'make build'",
				p.host, p.cmd.Path, first)
		}
		return fmt.Errorf("load on %s: %w: %s", p.host, err, lastLines(string(msg), 3))
	}
	return nil
}

func (p *loadProc) records() ([]iolog.Record, error) {
	f, err := os.Open(p.log)
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s: %w", p.host, err)
	}
	defer f.Close()
	recs, err := iolog.ReadRecords(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("reading the log of %s: %w", p.host, err)
	}
	return recs, nil
}

// loginSlack is how long the load generators get to log in (one session
// per thread) before the common start.
const loginSlack = 4 * time.Second

// daemonSlack is how long the daemon gets, after the logins, to discover
// the sessions and start ticking before the common start.
const daemonSlack = 4 * time.Second

// startSlack is how long a run waits before its load starts: the logins,
// and the daemon's start when there is one.
func (c Control) startSlack() time.Duration {
	if c.Controller != "" {
		return loginSlack + daemonSlack
	}
	return loginSlack
}

// runOne runs a workload under a control and analyses it. refMs is the
// threshold an uncontrolled run's over_threshold_pct is measured against.
func (e *env) runOne(ctx context.Context, name string, w Workload, c Control, refMs float64) (res *RunResult, err error) {
	dir := filepath.Join(e.o.Out, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	res = &RunResult{Name: name, Controller: c.Controller, Policy: c.Policy, Writers: w.Writers, Workload: w,
		Dir: dir, OverRefMs: refMs, WriterUnit: "thread", Group: w.Name}
	if c.Controller == "" {
		res.Controller = "none"
	}
	if c.Controller != "" && c.Controller != "none" {
		th := c.ThresholdMs
		res.ThresholdMs = &th
		res.OverRefMs = th
		if c.Controller == "pid" {
			res.UMaxMs = c.uMaxMs(e.o.Gains)
		}
	}

	namespaces := []string{lab.TargetNS}
	for _, h := range e.v.hosts {
		namespaces = append(namespaces, h.ns)
	}
	before, err := e.count.Counters(ctx, namespaces)
	if err != nil {
		return nil, err
	}

	var d *daemon
	record := filepath.Join(dir, "daemon-record.jsonl")
	t0 := time.Now().Add(c.startSlack()).Truncate(time.Second).Add(time.Second)
	startAt := func(off time.Duration) string {
		return strconv.FormatFloat(float64(t0.Add(off).UnixNano())/1e9, 'f', 3, 64)
	}
	var procs []*loadProc
	defer func() {
		// On any error, stop what still runs; the lab's Down would
		// kill them anyway, but a clean logout keeps tgtd tidy.
		for _, p := range procs {
			select {
			case err := <-p.done:
				p.done <- err
			default:
				_ = p.cmd.Process.Signal(os.Interrupt)
			}
		}
	}()
	start := func(h labHost, file string, fullBytes int64, args ...string) error {
		p, err := e.startLoad(ctx, h, filepath.Join(dir, file), fullBytes, args...)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		res.Commands = append(res.Commands, strings.Join(p.cmd.Args, " "))
		return nil
	}
	lunSize := e.l.State().Size
	readers := max(w.Readers, 1)
	preset := w.Reader
	if preset == "" {
		preset = "smalljob"
	}
	for i := 0; i < readers; i++ {
		h := e.v.hosts[i]
		if err := start(h, "reader-"+h.name+".jsonl", 0, "--job", preset, "--name", "reader-"+h.name,
			"--runtime", w.Total.String(), "--start-at", startAt(0), "--quiet"); err != nil {
			return nil, err
		}
	}
	if w.Writers > 0 {
		for i, n := range spread(w.Writers, len(e.v.writers)) {
			if n == 0 {
				continue
			}
			h := e.v.writers[i]
			region := lunSize / int64(n) / (1 << 20) // MiB per thread
			args := []string{"--job", w.writerJob(), "--name", "writers-" + h.name, "--threads", strconv.Itoa(n),
				"--size", strconv.FormatInt(region, 10) + "m", "--per-thread",
				"--runtime", w.WriterTime.String(), "--start-at", startAt(w.Lead), "--quiet"}
			if w.On != "" {
				args = append(args, "--on", w.On, "--off", w.Off.String())
			}
			full := int64(n) * region << 20
			if w.On != "" {
				full = 0 // bursts: it runs for its runtime
			}
			if err := start(h, "writers-"+h.name+".jsonl", full, args...); err != nil {
				return nil, err
			}
		}
	}

	// The daemon starts once the load generators have logged in (they
	// wait for t0): its first discovery then sees every session, which
	// the manual policy needs to resolve its consumers, and it records
	// its first ticks before t0.
	if c.Controller != "" {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(loginSlack):
		}
	}
	if c.Controller != "" {
		cfgPath := filepath.Join(dir, "sanqos.toml")
		if err := os.WriteFile(cfgPath, []byte(daemonConfig(c, e.o.Gains, e.v, record)), 0o644); err != nil {
			return nil, fmt.Errorf("writing the daemon's configuration: %w", err)
		}
		args := daemonArgs(cfgPath, record)
		var err error
		if d, err = startDaemon(ctx, e.o.Sanqos, args, record, filepath.Join(dir, "daemon.log")); err != nil {
			return nil, err
		}
		res.Commands = append(res.Commands, strings.Join(d.argv, " "))
		if c.FixedDelayMs > 0 {
			// Before t0: the writers start with the delay in force.
			cmds, err := setFixedDelay(ctx, e.o.Sanqos, e.v, c.FixedDelayMs)
			if err != nil {
				return nil, err
			}
			res.Commands = append(res.Commands, cmds...)
			res.FixedDelayMs = c.FixedDelayMs
		}
		defer func() {
			if serr := d.stop(); serr != nil && err == nil {
				err = fmt.Errorf("stopping the daemon: %w", serr)
			}
			os.RemoveAll(ctlSocketDir)
		}()
	}

	// Place retransmissions in time while the loads run.
	var nsProcs []nsProc
	for _, p := range procs {
		nsProcs = append(nsProcs, nsProc{host: p.host, ns: p.ns, pid: p.cmd.Process.Pid})
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []tcpSample, 1)
	go func() { sampled <- sampleTCP(sampleCtx, nsProcs, t0) }()
	defer stopSampling()

	// Wait for every load, showing progress.
	end := t0.Add(w.Total)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	waitErr := make(chan error, 1)
	go func() {
		var errs []error
		for _, p := range procs {
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
			e.prog.update(time.Until(end))
		}
	}
	stopSampling()
	samples := <-sampled
	if err := writeSamples(filepath.Join(dir, "tcp-samples.jsonl"), samples); err != nil {
		return nil, err
	}
	res.StealMs = stealDuring(samples)
	// The daemon records the release after the writers' last stop: the
	// reader ran on after them, so the record already covers it.
	after, err := e.count.Counters(ctx, namespaces)
	if err != nil {
		return nil, err
	}
	diff := counterDiff(before, after)
	if err := writeJSON(filepath.Join(dir, "tcp-counters.json"), diff); err != nil {
		return nil, err
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

	// A run that was cut short (a load generator killed from outside,
	// the lab taken down under it) must not pass for a measurement.
	for _, p := range procs {
		recs, err := p.records()
		if err != nil {
			return nil, err
		}
		want := w.Total
		if !strings.HasPrefix(filepath.Base(p.log), "reader-") {
			want = w.WriterTime
		}
		s, ok := iolog.Summary(recs, "")
		if ok && p.fullBytes > 0 && s.Bytes >= p.fullBytes {
			continue // it wrote its whole region: done, not stopped
		}
		if !ok || s.T < 0.95*want.Seconds() {
			return nil, fmt.Errorf("the load on %s ran %.0f s of %s: it was stopped from outside (was the lab taken down?); see %s",
				p.host, s.T, want, p.errf)
		}
	}

	// Analysis, from the logs alone.
	var readerRecs []iolog.Record
	allReaders := map[string][]iolog.Record{}
	var maxGap float64
	res.ReadersMBs = map[string]float64{}
	var wlogs []WriterLog
	for _, p := range procs {
		recs, err := p.records()
		if err != nil {
			return nil, err
		}
		if strings.HasPrefix(filepath.Base(p.log), "reader-") {
			if p.host == e.v.reader.name {
				readerRecs = recs
			}
			if s, ok := iolog.Summary(recs, ""); ok {
				res.ReadersMBs[p.host] = s.MBs
			}
			allReaders[p.host] = recs
			if readers > 1 {
				// fig5.1: the readers' per-second MB/s is the plot.
				wlogs = append(wlogs, WriterLog{Host: p.host, Records: recs})
			}
			continue
		}
		wlogs = append(wlogs, WriterLog{Host: p.host, Offset: w.Lead.Seconds(), Records: recs})
		for th := 1; ; th++ {
			s := iolog.Select(recs, iolog.KindSummary, th, iolog.OpWrite)
			if len(s) == 0 {
				break
			}
			res.WriterMBs = append(res.WriterMBs, s[len(s)-1].MBs)
			res.WriterNames = append(res.WriterNames, fmt.Sprintf("%s/%d", p.host, th))
		}
		if s, ok := iolog.Summary(recs, iolog.OpWrite); ok {
			res.MaxWriteIOMs = max(res.MaxWriteIOMs, s.Lat.Max)
			maxGap = max(maxGap, s.MaxGapMs)
		}
	}
	if readers > 1 {
		readerRecs = nil // fig5.1 has no wait to judge
	} else {
		res.ReadersMBs = nil
	}
	res.timeline = buildTimeline(readerRecs, wlogs)
	// Continuous writers (fig5.7, and its run with none): the window is
	// the writers' time; on/off writers: the seconds they were active.
	tl := res.timeline
	waits := tl.activeWaits()
	res.WriteMBs = iolog.Round3(tl.activeMean(tl.WriteMBs))
	res.ReaderKBs = iolog.Round3(tl.activeMean(tl.ReaderKBs))
	if w.On == "" && w.WriterTime > 0 {
		from, to := w.Lead.Seconds(), (w.Lead + w.WriterTime).Seconds()
		waits = tl.windowWaits(from, to)
		res.WriteMBs = iolog.Round3(tl.windowMean(tl.WriteMBs, from, to))
		res.ReaderKBs = iolog.Round3(tl.windowMean(tl.ReaderKBs, from, to))
	}
	res.WaitMs = statsOf(waits)
	res.ActiveSeconds = len(waits)
	if refMs > 0 {
		res.OverThresholdPct = iolog.Round3(overPct(waits, OverFactor*res.OverRefMs))
	}
	if readers == 1 && w.Writers > 0 && res.OverRefMs > 0 {
		bs := analyzeBursts(tl, OverFactor*res.OverRefMs)
		res.Bursts = &bs
	}
	if readers > 1 {
		var mbs []float64
		for _, v := range res.ReadersMBs {
			mbs = append(mbs, v)
		}
		res.Jain = iolog.Round3(iolog.JainIndex(mbs))
	}
	if preset == "smalljob" {
		res.ReaderGoalKBs = 256 * 1024 / 1000.0
	}
	if len(res.WriterMBs) > 0 {
		res.Jain = iolog.Round3(iolog.JainIndex(res.WriterMBs))
	}

	if d != nil {
		// Stop the daemon before reading its record so the file is
		// complete; the deferred stop is then a no-op.
		if err := d.stop(); err != nil {
			return nil, fmt.Errorf("stopping the daemon: %w", err)
		}
		recs, err := readRecord(record)
		if err != nil {
			return nil, err
		}
		res.ticks = ticksOf(recs, float64(t0.UnixNano())/1e9)
		ds := delayStats(res.ticks)
		res.Delay = &ds
		if c.Signal != "" && res.ThresholdMs != nil {
			h := signalHold(res.ticks, c.Signal, *res.ThresholdMs)
			res.SignalHold = &h
		}
		if c.Controller != "none" {
			// An observing daemon never delays; its set lingers by
			// design and says nothing about release.
			rs := summarizeReleases(releases(res.ticks))
			res.Release = &rs
		}
	}
	g := &Guarantees{MaxWriteIOMs: res.MaxWriteIOMs, MaxWriteGapMs: maxGap, MinJain: 1, WriteCV: -1}
	g.RTOs, g.Undetected = lossOf(res)
	if res.Bursts != nil {
		g.BurstJain = burstJain(res.Bursts.Bursts, wlogs)
		for _, j := range g.BurstJain {
			g.MinJain = min(g.MinJain, j)
		}
	}
	if w.Writers > 0 {
		g.WriteCV, g.CVSeconds, g.CVMBs = binCV(tl, steadySeconds(tl, res.ticks, res.ThresholdMs != nil))
	}
	if readers > 1 {
		g.ReaderP95Ms, g.ReaderMBs = readersWait(allReaders, 0, w.Total.Seconds())
	} else {
		g.ReaderP95Ms, g.ReaderMBs = res.WaitMs.P95, iolog.Round3(res.ReaderKBs/1000)
	}
	res.Guarantees = g
	// Without a daemon there are no ticks: the events carry steal only.
	res.RetransmitEvents = retransmitEvents(samples, res.ticks)
	if n := len(res.ticks); n > 0 {
		res.Takeovers = res.ticks[n-1].Takeovers - res.ticks[0].Takeovers
	}
	if err := writeJSON(filepath.Join(dir, "result.json"), res); err != nil {
		return nil, err
	}
	return res, nil
}

// round1 rounds for display.
func round1(x float64) float64 { return math.Round(x*10) / 10 }
