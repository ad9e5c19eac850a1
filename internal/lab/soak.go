package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SoakOptions configure a soak: the fig5.11 workload (smalljob on the
// first initiator, 12 sequential 64 KiB writer threads on the others in
// 32 MiB bursts with 5 s pauses) against one sanqos daemon (pid at 15 ms,
// tgt discovery, nfqueue) for Duration, sampling the daemon every
// Interval.
type SoakOptions struct {
	Duration, Interval time.Duration
	// Sanqos is the daemon's binary.
	Sanqos string
	// Out is a directory for the daemon's config, log and record, the
	// load's logs and soak.tsv (the samples).
	Out      string
	Progress io.Writer
}

// SoakSample is one look at the daemon.
type SoakSample struct {
	At      time.Duration // since the daemon started
	RSSKiB  int64
	Threads int64
	// Goroutines is the daemon's go_goroutines metric; -1 when the
	// metrics could not be read (the daemon binds its port late).
	Goroutines int64
	FDs        int64
	// Objects are the kernel objects it owns in the target namespace:
	// lines of its SANQOS chain and sanqos-* ipsets.
	Objects int64
}

// SoakReport is the outcome: per quantity, the growth over the run that
// a least-squares line through the samples after warm-up implies, and
// what the daemon left behind.
type SoakReport struct {
	Samples []SoakSample
	// Growth per hour (slopes) and over the measured span.
	RSSKiBPerHour, ThreadsPerHour, GoroutinesPerHour, FDsPerHour, ObjectsPerHour float64
	Span                                                                         time.Duration
	Leftovers                                                                    []string
	Failures                                                                     []string
}

// soakWarmup is the part of a soak not judged: the Go heap, the flow
// tables and the first discoveries settle in the first minute.
const soakWarmup = time.Minute

// soakMetrics is where the soak's daemon serves its metrics, in the
// target namespace; the soak reads its goroutines there.
const soakMetrics = "127.0.0.1:9469"

// Soak runs the workload and the daemon on the lab, then judges the
// samples (Judge) and checks that stopping the daemon left nothing in
// the kernel.
func (l *Lab) Soak(ctx context.Context, o SoakOptions) (*SoakReport, error) {
	if o.Interval <= 0 {
		o.Interval = 10 * time.Second
	}
	if o.Duration < 2*soakWarmup {
		return nil, fmt.Errorf("soak --duration %v: want at least %v (the first %v is warm-up)", o.Duration, 2*soakWarmup, soakWarmup)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	inits := l.Initiators()
	if len(inits) < 2 {
		return nil, errors.New("soak: the lab has fewer than two initiators")
	}
	d, err := startSoakDaemon(ctx, o)
	if err != nil {
		return nil, err
	}
	defer d.cleanup()
	defer d.stop()
	stopLoads, err := l.startSoakLoad(ctx, o)
	defer stopLoads()
	if err != nil {
		return nil, err
	}
	o.progress("daemon pid %d, load on %d initiators, %v, a sample every %v", d.cmd.Process.Pid, len(inits), o.Duration, o.Interval)
	rep, err := sampleSoak(ctx, o, d)
	if err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		rep.Failures = append(rep.Failures, err.Error())
	}
	left, err := ownedObjects(ctx)
	if err != nil {
		return nil, err
	}
	rep.Leftovers = left
	Judge(rep)
	return rep, nil
}

func (o SoakOptions) progress(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "soak: "+format+"\n", a...)
	}
}

// soakDaemon is the daemon under soak.
type soakDaemon struct {
	cmd     *exec.Cmd
	exited  chan error
	log     *os.File
	sockDir string
	started time.Time
}

// startSoakDaemon writes the daemon's configuration (pid at 15 ms, tgt
// discovery, nfqueue, metrics on soakMetrics) and starts it in the
// target namespace.
func startSoakDaemon(ctx context.Context, o SoakOptions) (*soakDaemon, error) {
	sockDir := "/run/sanqos-soak"
	if err := os.MkdirAll(sockDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", sockDir, err)
	}
	cfg := filepath.Join(o.Out, "sanqos.toml")
	record := filepath.Join(o.Out, "daemon-record.jsonl")
	conf := fmt.Sprintf("tick = \"100ms\"\nthreshold = \"15ms\"\ncontroller = \"pid\"\nbackend = \"nfqueue\"\nports = [%d]\n"+
		"listen = %q\nsocket = %q\nrecord = %q\n[discovery]\nadapter = \"tgt\"\ninterval = \"5s\"\ntgt_control_port = %d\n",
		ISCSIPort, soakMetrics, filepath.Join(sockDir, "ctl.sock"), record, ControlPort)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("writing the daemon's config: %w", err)
	}
	logf, err := os.Create(filepath.Join(o.Out, "daemon.log"))
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	cmd := Command(context.WithoutCancel(ctx), TargetNS, o.Sanqos, "run", "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	d := &soakDaemon{cmd: cmd, exited: make(chan error, 1), log: logf, sockDir: sockDir, started: time.Now()}
	go func() { d.exited <- cmd.Wait() }()
	return d, nil
}

// stop sends SIGTERM and waits up to 15 s; it may be called again.
func (d *soakDaemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.exited:
		d.exited <- err
		return nil
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		return errors.New("the daemon did not stop within 15 s of SIGTERM")
	}
}

func (d *soakDaemon) cleanup() {
	d.log.Close()
	os.RemoveAll(d.sockDir)
}

// startSoakLoad starts the fig5.11 workload for the whole soak and
// returns what stops it (also after an error).
func (l *Lab) startSoakLoad(ctx context.Context, o SoakOptions) (stop func(), err error) {
	var loads []*exec.Cmd
	stop = func() {
		for _, c := range loads {
			_ = c.Process.Signal(os.Interrupt)
		}
		if len(loads) > 0 {
			time.Sleep(2 * time.Second) // sessions log out
		}
	}
	start := func(in string, file string, args ...string) error {
		cmd, err := l.LoadCommand(context.WithoutCancel(ctx), in, args...)
		if err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(o.Out, file))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			return fmt.Errorf("starting load on %s: %w", in, err)
		}
		loads = append(loads, cmd)
		go func() { cmd.Wait(); f.Close() }()
		return nil
	}
	inits := l.Initiators()
	run := o.Duration.String()
	if err := start(inits[0].Name, "reader.jsonl", "--job", "smalljob", "--name", "reader", "--runtime", run, "--quiet"); err != nil {
		return stop, err
	}
	writers := inits[1:]
	per := 12 / len(writers)
	region := l.State().Size / int64(per) / (1 << 20)
	for _, in := range writers {
		if err := start(in.Name, "writers-"+in.Name+".jsonl", "--job", "seqwrite-64k", "--name", "writers-"+in.Name,
			"--threads", strconv.Itoa(per), "--size", strconv.FormatInt(region, 10)+"m", "--per-thread",
			"--runtime", run, "--on", "32m", "--off", "5s", "--quiet"); err != nil {
			return stop, err
		}
	}
	return stop, nil
}

// sampleSoak samples the daemon every o.Interval until o.Duration has
// passed since it started, writing soak.tsv.
func sampleSoak(ctx context.Context, o SoakOptions, d *soakDaemon) (*SoakReport, error) {
	tsv, err := os.Create(filepath.Join(o.Out, "soak.tsv"))
	if err != nil {
		return nil, err
	}
	defer tsv.Close()
	fmt.Fprintf(tsv, "t_s\trss_kib\tthreads\tgoroutines\tfds\tobjects\n")
	rep := &SoakReport{}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for end := d.started.Add(o.Duration); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-d.exited:
			d.exited <- err
			return nil, fmt.Errorf("the daemon exited during the soak (%v); see %s", err, d.log.Name())
		case <-t.C:
		}
		s, err := sampleDaemon(ctx, d.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		s.At = time.Since(d.started)
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(tsv, "%.0f\t%d\t%d\t%d\t%d\t%d\n", s.At.Seconds(), s.RSSKiB, s.Threads, s.Goroutines, s.FDs, s.Objects)
		if len(rep.Samples)%6 == 0 {
			o.progress("%v: RSS %d KiB, %d threads, %d goroutines, %d descriptors, %d kernel objects",
				s.At.Round(time.Second), s.RSSKiB, s.Threads, s.Goroutines, s.FDs, s.Objects)
		}
	}
	return rep, nil
}

// Judge fits a line through the samples after the warm-up and fails a
// quantity whose line grows over the span by more than noise allows:
// descriptors, threads or kernel objects by more than 2, goroutines by
// more than 10 or 10 % of their mean, RSS by more than 4 MiB or 10 % of
// its mean. Leftovers fail too, and so does a daemon whose metrics could
// not be read after warm-up.
func Judge(rep *SoakReport) {
	var xs, rss, thr, gor, fds, obj []float64
	unread := 0
	for _, s := range rep.Samples {
		if s.At < soakWarmup {
			continue
		}
		if s.Goroutines < 0 {
			unread++
		}
		xs = append(xs, s.At.Hours())
		rss = append(rss, float64(s.RSSKiB))
		thr = append(thr, float64(s.Threads))
		gor = append(gor, float64(s.Goroutines))
		fds = append(fds, float64(s.FDs))
		obj = append(obj, float64(s.Objects))
	}
	if len(xs) < 3 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("only %d samples after the %v warm-up; run longer", len(xs), soakWarmup))
		return
	}
	rep.Span = time.Duration((xs[len(xs)-1] - xs[0]) * float64(time.Hour))
	rep.RSSKiBPerHour, rep.ThreadsPerHour = Slope(xs, rss), Slope(xs, thr)
	rep.GoroutinesPerHour = Slope(xs, gor)
	rep.FDsPerHour, rep.ObjectsPerHour = Slope(xs, fds), Slope(xs, obj)
	h := rep.Span.Hours()
	check := func(name string, perHour, limit float64, unit string) {
		if perHour*h > limit {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s grew %.1f %s over %v (%.1f/h), limit %.1f", name, perHour*h, unit, rep.Span.Round(time.Second), perHour, limit))
		}
	}
	check("RSS", rep.RSSKiBPerHour, max(4096, 0.1*mean(rss)), "KiB")
	// Go's runtime keeps every OS thread it made for a blocking call: a
	// burst of them is a step that stays, which a line through the
	// samples stretches to about 1.5 times its height when it falls
	// mid-span. A leak keeps adding; so threads fail on their net
	// change over the span, and only while they still grow.
	if d := thr[len(thr)-1] - thr[0]; d > 2 && rep.ThreadsPerHour > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("threads grew %.0f over %v (%.1f/h), limit 2", d, rep.Span.Round(time.Second), rep.ThreadsPerHour))
	}
	if unread > 0 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("the daemon's metrics (goroutines) could not be read in %d samples after warm-up", unread))
	} else {
		check("goroutines", rep.GoroutinesPerHour, max(10, 0.1*mean(gor)), "")
	}
	check("descriptors", rep.FDsPerHour, 2, "")
	check("kernel objects", rep.ObjectsPerHour, 2, "")
	for _, l := range rep.Leftovers {
		rep.Failures = append(rep.Failures, "left behind: "+l)
	}
}

// Slope is the least-squares slope of ys over xs.
func Slope(xs, ys []float64) float64 {
	mx, my := mean(xs), mean(ys)
	var num, den float64
	for i := range xs {
		num += (xs[i] - mx) * (ys[i] - my)
		den += (xs[i] - mx) * (xs[i] - mx)
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// sampleDaemon reads pid's RSS and threads (/proc/PID/status), its open
// descriptors, and the kernel objects in the target namespace.
func sampleDaemon(ctx context.Context, pid int) (SoakSample, error) {
	var s SoakSample
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, fmt.Errorf("sampling the daemon: %w", err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			s.RSSKiB = n
		case "Threads":
			s.Threads = n
		}
	}
	s.Goroutines = daemonGoroutines(ctx)
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, fmt.Errorf("sampling the daemon's descriptors: %w", err)
	}
	s.FDs = int64(len(ents))
	objs, err := ownedObjects(ctx)
	if err != nil {
		return s, err
	}
	s.Objects = int64(len(objs))
	return s, nil
}

// ownedObjects lists the daemon's kernel objects in the target namespace:
// rules of chains named SANQOS* in the mangle table and sanqos-* ipsets.
func ownedObjects(ctx context.Context) ([]string, error) {
	var out []string
	rules, err := Command(ctx, TargetNS, "iptables-save", "-t", "mangle").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the target's iptables rules: %w", err)
	}
	for _, l := range strings.Split(string(rules), "\n") {
		if strings.Contains(l, "SANQOS") {
			out = append(out, "iptables "+l)
		}
	}
	sets, err := Command(ctx, TargetNS, "ipset", "list", "-n").Output()
	if err != nil {
		return nil, fmt.Errorf("listing the target's ipsets: %w", err)
	}
	for _, l := range strings.Fields(string(sets)) {
		if strings.HasPrefix(l, "sanqos") {
			out = append(out, "ipset "+l)
		}
	}
	return out, nil
}

// daemonGoroutines reads go_goroutines from the daemon's metrics in the
// target namespace, or -1. The connection is dialled on the thread that
// is in the namespace; http.Transport would dial on another goroutine,
// so the request is written by hand.
func daemonGoroutines(ctx context.Context) int64 {
	var conn net.Conn
	err := InNetNS(TargetNS, func() error {
		var err error
		conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", soakMetrics)
		return err
	})
	if err != nil {
		return -1
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", soakMetrics); err != nil {
		return -1
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return -1
	}
	return metricValue(string(body), "go_goroutines")
}

// metricValue finds an unlabelled sample of name in a Prometheus text
// exposition, or -1.
func metricValue(exposition, name string) int64 {
	for _, line := range strings.Split(exposition, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return int64(v)
			}
		}
	}
	return -1
}
