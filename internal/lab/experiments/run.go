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
// reader (b2) and the writer hosts (b3–b5), and whether the loads speak
// NFS (to the lab's NFS target) rather than iSCSI.
type labView struct {
	port, controlPort int
	reader            labHost
	writers           []labHost
	hosts             []labHost // every initiator, b2 first
	nfs               bool
}

func viewOf(l *lab.Lab, nfs bool) (labView, error) {
	v := labView{port: l.Target().Port, controlPort: l.Target().ControlPort, nfs: nfs}
	if nfs {
		n := l.NFS()
		if n == nil {
			return v, fmt.Errorf("the experiment runs over NFS and the lab has no NFS target (lab.Options.NFS)")
		}
		v.port = n.Port
	}
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

func (v labView) hostNames() []string {
	var out []string
	for _, h := range v.hosts {
		out = append(out, h.name)
	}
	return out
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
	// WriterDepth is each writer thread's I/Os outstanding (--iodepth;
	// 0 and 1: one at a time), WriterFsync its writes between flushes
	// (--fsync; 0: none).
	WriterDepth int `json:"writer_depth,omitempty"`
	WriterFsync int `json:"writer_fsync,omitempty"`
	// TurnReader, when set, runs a second reader on the first writer
	// host (b3) and has the two take turns: each reads for this long,
	// then pauses as long while the other reads. The writers run on the
	// other hosts.
	TurnReader time.Duration `json:"turn_reader,omitempty"`
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
	// TargetWaitMs summarises the same seconds' mean read latency at the
	// target's devices, of the reads the daemon timed there (every
	// reader's; nil without a daemon): WaitMs less this is the target's
	// own path.
	TargetWaitMs *Stats `json:"target_wait_ms,omitempty"`
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
	Retransmits int64 `json:"retransmits"`
	// Tenants is a run with per-consumer terms measured against them.
	Tenants       *TenantResult    `json:"tenants,omitempty"`
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
	// Schedule is the run's timed throttles as they took effect.
	Schedule []Applied `json:"schedule,omitempty"`
	// ScheduleEffects is what each window of the schedule did.
	ScheduleEffects []Effect `json:"schedule_effects,omitempty"`
	// WindowWaits is smalljob's mean wait outside and in each delay
	// window of the schedule (fig5.8).
	WindowWaits []WindowWait `json:"window_waits,omitempty"`
	// Delay and Release come from the daemon's record, and so do
	// ReaderInSet and WritersInSet: how often the reader (b2) and each
	// writer host were in a throttleable set.
	Delay        *DelayStats     `json:"delay_ms,omitempty"`
	ReaderInSet  *SetMembership  `json:"reader_in_set,omitempty"`
	WritersInSet []SetMembership `json:"writers_in_set,omitempty"`
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
	judged   []int // the timeline's seconds WaitMs summarises
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
}

// startLoad starts a load generator, which runs for its runtime.
func (e *env) startLoad(ctx context.Context, host labHost, logPath string, args ...string) (*loadProc, error) {
	cmd, err := e.loadCommand(context.WithoutCancel(ctx), host, isReaderLog(logPath), args)
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
	p := &loadProc{host: host.name, ns: host.ns, cmd: cmd, log: logPath, errf: errPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); out.Close(); errf.Close() }()
	return p, nil
}

// loadCommand is the load generator on host against the lab's iSCSI
// target, or over NFS on the host's reader or writer files.
func (e *env) loadCommand(ctx context.Context, host labHost, reader bool, args []string) (*exec.Cmd, error) {
	if !e.v.nfs {
		return e.l.LoadCommand(ctx, host.name, args...)
	}
	file := lab.NFSWriterFile(host.name)
	if reader {
		file = lab.NFSReaderFile(host.name)
	}
	return e.l.NFSLoadCommand(ctx, host.name, file, args...)
}

// isReaderLog tells a reader's log (reader-HOST.jsonl) from a writers'.
func isReaderLog(path string) bool { return strings.HasPrefix(filepath.Base(path), "reader-") }

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

func round1(x float64) float64 { return math.Round(x*10) / 10 }
