package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/lab/iolog"
	"github.com/sanqos/sanqos/internal/lab/loadspec"
)

const description = `An fio-like iSCSI and NFS load generator for the sanqos lab. It logs in to one
LUN with libiscsi, once per thread (each thread has its own iSCSI session and
TCP connection), and keeps one synchronous I/O in flight per thread, like fio
with ioengine=sync and direct=1; with --iodepth N each thread keeps N I/Os
outstanding on its connection instead, through libiscsi's (libnfs's)
asynchronous calls, like fio with ioengine=libaio iodepth=N.

With --nfs nfs://HOST/EXPORT it speaks NFSv3 through libnfs instead: each
thread mounts the export with its own libnfs context (its own TCP connection
to port 2049) and works on a file of its own, --nfs-file with %d replaced by
the thread number (1..N), opened O_SYNC so that every WRITE is FILE_SYNC (on
the server's disk when it completes); with --fsync N the WRITEs are UNSTABLE
instead and every N of them are followed by a COMMIT, as a kernel client's
buffered writes and fsync are (on a LUN, --fsync sends SYNCHRONIZE CACHE).
A missing file is created at --offset
+ --size: written out for a read job (a hole would read as zeros without
touching the disk), sparse for a write job. Threads' regions are then in
their own files, all at --offset.

Output: one JSON line per second on stdout (or --log FILE) with the job's
throughput, IOPS and latency (mean, p50, p99, max) over all threads, plus one
per thread with --per-thread, and summary lines at the end; the last line is
the job's summary. Fields: kind (interval|summary), t (s since start, end of
the interval), job, thread (0 = all threads, else 1..N), op (read|write), dur
(s), mb_s (10^6 B/s), iops, lat_ms {mean,p50,p99,max}, ios, bytes, max_gap_ms
(the longest wait from one completion to the next, the rate limit's and the
on/off pauses left out); the job's intervals add bins_bytes (bytes completed
in each 100 ms); summaries add errors, and with --verify verified and
mismatches. An on/off job adds, per thread and burst, a line of kind burst
(t: its last completion, dur: from the burst's start to it). --io-log FILE adds one
line per I/O: t (s, when issued), thread, op, offset, len (bytes), lat_us.

Each thread works on its own region of the LUN (--size bytes, one after the
other from --offset), so threads never overwrite each other. SIGINT or SIGTERM
stops cleanly: every session logs out and the summary is printed.

Examples:
  sanqos-iscsiload --portal 10.213.0.253 --target iqn.2010-05.sanqos:lun1 --job smalljob --runtime 60s
  sanqos-iscsiload --portal 10.213.0.253 --target T --job seqwrite-64k --threads 4 --on 64m --off 5s --runtime 120s
  sanqos-iscsiload --portal 10.213.0.253 --target T --rw write --bs 64k --size 32m --verify
  sanqos-iscsiload --nfs nfs://10.213.0.253/export --nfs-file b3-w%d.dat --job seqwrite-64k --threads 4 --size 64m --runtime 60s

Exit status: 0 when the job ran (or was stopped by a signal), 1 when the
target could not be used, an I/O failed or verify found damaged blocks, 2 for
bad flags.`

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code := parseCLI(args, stderr)
	if code >= 0 {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sanqos-iscsiload: %v\n", err)
		return 1
	}
	// libiscsi's text for a refused TCP connection is about reconnecting;
	// probing the port first gives the user the real reason.
	if err := probe(ctx, o.probeAddr(), o.server(), o.dialTimeout); err != nil {
		return fail(err)
	}
	out := stdout
	if o.logPath != "" {
		f, err := os.Create(o.logPath)
		if err != nil {
			return fail(fmt.Errorf("creating --log file: %w", err))
		}
		defer f.Close()
		out = f
	}
	e := o.generator(out, stderr)
	if o.ioLogPath != "" {
		f, err := os.Create(o.ioLogPath)
		if err != nil {
			return fail(fmt.Errorf("creating --io-log file: %w", err))
		}
		defer f.Close()
		e.IOLog = iolog.NewWriter(f)
		defer e.IOLog.Flush()
	}
	res, err := e.Run(ctx)
	if e.IOLog != nil {
		if ferr := e.IOLog.Flush(); ferr != nil && err == nil {
			err = fmt.Errorf("writing --io-log: %w", ferr)
		}
	}
	if err != nil {
		return fail(err)
	}
	if !o.quiet {
		note := ""
		if res.Interrupted {
			note = " (interrupted)"
		}
		fmt.Fprintf(stderr, "sanqos-iscsiload: %s%s: %s\n", o.job.Name, note, res.totals)
	}
	if res.mismatches > 0 {
		return fail(fmt.Errorf("verify: %d of %d blocks differ from what was written; first: %s", res.mismatches, res.verified, res.firstMismatch))
	}
	return 0
}

// cliOptions are the parsed and checked command line.
type cliOptions struct {
	job                     loadspec.Job
	addr, target, initiator string
	// nfs, when its Server is set, selects the NFS transport.
	nfs                     nfsTarget
	lun                     int
	headerDigest, perThread bool
	quiet                   bool
	ioTimeout, dialTimeout  time.Duration
	progressEvery           time.Duration
	logPath, ioLogPath      string
	start                   time.Time
}

// generator is the Generator the options describe, writing to out and
// logging to stderr.
func (o cliOptions) generator(out, stderr io.Writer) *Generator {
	e := &Generator{
		Job:       o.job,
		Clock:     clock.Real{},
		Out:       iolog.NewWriter(out),
		PerThread: o.perThread,
		StartAt:   o.start,
		Log:       slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Open: func(thread int) (Device, error) {
			return openSession(sessionConfig{Portal: o.addr, Target: o.target, LUN: o.lun,
				Initiator: fmt.Sprintf("%s-%d", o.initiator, thread), HeaderDigest: o.headerDigest,
				Timeout: int(o.ioTimeout / time.Second)})
		},
	}
	if o.nfs.Server != "" {
		job := o.job
		e.OwnDevices = true
		e.Open = func(thread int) (Device, error) {
			return openNFS(nfsConfig{nfsTarget: o.nfs, Thread: thread, Size: job.Offset + job.Size,
				Fill: !job.Mode.IsWrite(), Timeout: int(o.ioTimeout / time.Second), Unstable: job.Fsync > 0})
		}
	}
	if !o.quiet {
		e.Progress, e.ProgressEvery = stderr, o.progressEvery
	}
	return e
}

// parseCLI parses and checks the flags; code is the exit code to return
// at once (0 for --help, 2 for a usage error), or -1 to go on.
func parseCLI(args []string, stderr io.Writer) (o cliOptions, code int) {
	fs := flag.NewFlagSet("sanqos-iscsiload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sanqos-iscsiload --portal HOST[:PORT] --target IQN [flags]\n       sanqos-iscsiload --nfs nfs://HOST/EXPORT [--nfs-file NAME] [flags]\n\n%s\n\nFlags:\n", description)
		fs.PrintDefaults()
	}
	// The host name only makes the default initiator name unique per
	// machine; without one a fixed word keeps the IQN well formed.
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sanqos"
	}
	portal := fs.String("portal", "", "target portal, HOST or HOST:PORT (port 3260 when left out) (required for iSCSI)")
	fs.StringVar(&o.target, "target", "", "target IQN, e.g. iqn.2010-05.sanqos:lun1 (required for iSCSI)")
	nfsURL := fs.String("nfs", "", "speak NFSv3 to this export instead of iSCSI: nfs://HOST/EXPORT")
	fs.StringVar(&o.nfs.File, "nfs-file", "load-%d.dat", "with --nfs: each thread's file on the export, %d replaced by the thread number")
	fs.IntVar(&o.lun, "lun", 1, "LUN number (tgt's LUN 0 is its controller, disks start at 1)")
	fs.StringVar(&o.initiator, "initiator", "iqn.2010-05.sanqos.load:"+host, "initiator name; \"-N\" is appended for thread N")
	fs.BoolVar(&o.headerDigest, "header-digest", false, "use CRC32C header digests")
	fs.DurationVar(&o.ioTimeout, "io-timeout", 30*time.Second, "fail an iSCSI command (or login) that takes longer than this; whole seconds, 0 for none")
	fs.DurationVar(&o.dialTimeout, "connect-timeout", 5*time.Second, "how long to wait for the portal's TCP port before giving up")
	fs.StringVar(&o.logPath, "log", "", "write the per-second JSON lines to FILE instead of stdout")
	fs.StringVar(&o.ioLogPath, "io-log", "", "also write one JSON line per I/O to FILE")
	fs.BoolVar(&o.perThread, "per-thread", false, "also write per-second lines for each thread")
	startAt := fs.String("start-at", "", "start the I/O at this Unix time (seconds, may have decimals), after all threads logged in; lets generators in several namespaces start together")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress and no closing summary on stderr")
	fs.DurationVar(&o.progressEvery, "progress", 10*time.Second, "interval of the progress line on stderr")
	jf := loadspec.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, 0
		}
		return o, 2
	}
	usageErr := func(format string, a ...any) (cliOptions, int) {
		fmt.Fprintf(stderr, "sanqos-iscsiload: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Run 'sanqos-iscsiload --help' for the flags.\n")
		return o, 2
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if o.job, err = jf.Job(); err != nil {
		return usageErr("%v", err)
	}
	switch {
	case *nfsURL != "" && (*portal != "" || o.target != ""):
		return usageErr("--nfs and --portal/--target choose different protocols: give one")
	case *nfsURL != "":
		if o.nfs.Server, o.nfs.Export, err = parseNFSURL(*nfsURL); err != nil {
			return usageErr("%v", err)
		}
		if o.nfs.File == "" || strings.Count(o.nfs.File, "%") > 1 || strings.Contains(o.nfs.File, "%") && !strings.Contains(o.nfs.File, "%d") {
			return usageErr("--nfs-file %q: want a file name with at most one %%d (the thread number)", o.nfs.File)
		}
	case *portal == "" || o.target == "":
		return usageErr("--portal and --target are required (or --nfs for NFS)")
	}
	o.addr = *portal
	if _, _, err := net.SplitHostPort(o.addr); err != nil && o.addr != "" {
		o.addr = net.JoinHostPort(o.addr, "3260")
	}
	if o.ioTimeout < 0 || o.ioTimeout%time.Second != 0 {
		return usageErr("--io-timeout must be whole seconds, e.g. 30s")
	}
	if *startAt != "" {
		f, err := strconv.ParseFloat(*startAt, 64)
		if err != nil || f <= 0 {
			return usageErr("--start-at %q: want a Unix time in seconds, e.g. %d", *startAt, time.Now().Unix()+5)
		}
		sec, frac := math.Modf(f)
		o.start = time.Unix(int64(sec), int64(frac*1e9))
	}
	return o, -1
}

// probeAddr is the TCP address the transport connects to first.
func (o cliOptions) probeAddr() string {
	if o.nfs.Server != "" {
		return nfsProbeAddr(o.nfs.Server)
	}
	return o.addr
}

// server names the target's server for messages.
func (o cliOptions) server() string {
	if o.nfs.Server != "" {
		return "nfs-ganesha (or another NFS server)"
	}
	return "tgtd"
}

// probe checks that the portal accepts TCP connections, and explains why
// not in one line; server names what should listen there.
func probe(ctx context.Context, addr, server string, timeout time.Duration) error {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		return c.Close()
	}
	var why string
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused — is " + server + " running in the target namespace?"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		why = "no route to the target — is this namespace wired to the target's network?"
	case errors.As(err, &ne) && ne.Timeout():
		why = fmt.Sprintf("no answer within %s — is the address right and the target up?", timeout)
	default:
		why = err.Error()
	}
	return fmt.Errorf("cannot connect to %s: %s", addr, why)
}
