package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	FDs     int64
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
	RSSKiBPerHour, ThreadsPerHour, FDsPerHour, ObjectsPerHour float64
	Span                                                      time.Duration
	Leftovers                                                 []string
	Failures                                                  []string
}

// soakWarmup is the part of a soak not judged: the Go heap, the flow
// tables and the first discoveries settle in the first minute.
const soakWarmup = time.Minute

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
	progress := func(format string, a ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "soak: "+format+"\n", a...)
		}
	}
	inits := l.Initiators()
	if len(inits) < 2 {
		return nil, errors.New("soak: the lab has fewer than two initiators")
	}
	sockDir := "/run/sanqos-soak"
	if err := os.MkdirAll(sockDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", sockDir, err)
	}
	defer os.RemoveAll(sockDir)
	cfg := filepath.Join(o.Out, "sanqos.toml")
	record := filepath.Join(o.Out, "daemon-record.jsonl")
	conf := fmt.Sprintf("tick = \"100ms\"\nthreshold = \"15ms\"\ncontroller = \"pid\"\nbackend = \"nfqueue\"\nports = [%d]\n"+
		"listen = \"127.0.0.1:9469\"\nsocket = %q\nrecord = %q\n[discovery]\nadapter = \"tgt\"\ninterval = \"5s\"\ntgt_control_port = %d\n",
		ISCSIPort, filepath.Join(sockDir, "ctl.sock"), record, ControlPort)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return nil, fmt.Errorf("writing the daemon's config: %w", err)
	}
	logf, err := os.Create(filepath.Join(o.Out, "daemon.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	daemon := Command(context.WithoutCancel(ctx), TargetNS, o.Sanqos, "run", "--config", cfg)
	daemon.Stdout, daemon.Stderr = logf, logf
	if err := daemon.Start(); err != nil {
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	started := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	stopDaemon := func() error {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			exited <- err
			return nil
		case <-time.After(15 * time.Second):
			_ = daemon.Process.Kill()
			return errors.New("the daemon did not stop within 15 s of SIGTERM")
		}
	}
	defer stopDaemon()

	// The load: it runs for the whole soak.
	var loads []*exec.Cmd
	startLoad := func(in string, file string, args ...string) error {
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
	defer func() {
		for _, c := range loads {
			_ = c.Process.Signal(os.Interrupt)
		}
		time.Sleep(2 * time.Second) // sessions log out
	}()
	run := o.Duration.String()
	if err := startLoad(inits[0].Name, "reader.jsonl", "--job", "smalljob", "--name", "reader", "--runtime", run, "--quiet"); err != nil {
		return nil, err
	}
	writers := inits[1:]
	per := 12 / len(writers)
	region := l.State().Size / int64(per) / (1 << 20)
	for _, in := range writers {
		if err := startLoad(in.Name, "writers-"+in.Name+".jsonl", "--job", "seqwrite-64k", "--name", "writers-"+in.Name,
			"--threads", strconv.Itoa(per), "--size", strconv.FormatInt(region, 10)+"m", "--per-thread",
			"--runtime", run, "--on", "32m", "--off", "5s", "--quiet"); err != nil {
			return nil, err
		}
	}
	progress("daemon pid %d, load on %d initiators, %v, a sample every %v", daemon.Process.Pid, len(inits), o.Duration, o.Interval)

	tsv, err := os.Create(filepath.Join(o.Out, "soak.tsv"))
	if err != nil {
		return nil, err
	}
	defer tsv.Close()
	fmt.Fprintf(tsv, "t_s\trss_kib\tthreads\tfds\tobjects\n")
	rep := &SoakReport{}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	end := started.Add(o.Duration)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-exited:
			exited <- err
			return nil, fmt.Errorf("the daemon exited during the soak (%v); see %s", err, logf.Name())
		case <-t.C:
		}
		s, err := sampleDaemon(ctx, daemon.Process.Pid)
		if err != nil {
			return nil, err
		}
		s.At = time.Since(started)
		rep.Samples = append(rep.Samples, s)
		fmt.Fprintf(tsv, "%.0f\t%d\t%d\t%d\t%d\n", s.At.Seconds(), s.RSSKiB, s.Threads, s.FDs, s.Objects)
		if len(rep.Samples)%6 == 0 {
			progress("%v: RSS %d KiB, %d threads, %d descriptors, %d kernel objects", s.At.Round(time.Second), s.RSSKiB, s.Threads, s.FDs, s.Objects)
		}
	}
	if err := stopDaemon(); err != nil {
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

// Judge fits a line through the samples after the warm-up and fails a
// quantity whose line grows over the span by more than noise allows:
// descriptors, threads or kernel objects by more than 2, RSS by more than
// 4 MiB or 10 % of its mean. Leftovers fail too.
func Judge(rep *SoakReport) {
	var xs, rss, thr, fds, obj []float64
	for _, s := range rep.Samples {
		if s.At < soakWarmup {
			continue
		}
		xs = append(xs, s.At.Hours())
		rss = append(rss, float64(s.RSSKiB))
		thr = append(thr, float64(s.Threads))
		fds = append(fds, float64(s.FDs))
		obj = append(obj, float64(s.Objects))
	}
	if len(xs) < 3 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("only %d samples after the %v warm-up; run longer", len(xs), soakWarmup))
		return
	}
	rep.Span = time.Duration((xs[len(xs)-1] - xs[0]) * float64(time.Hour))
	rep.RSSKiBPerHour, rep.ThreadsPerHour = Slope(xs, rss), Slope(xs, thr)
	rep.FDsPerHour, rep.ObjectsPerHour = Slope(xs, fds), Slope(xs, obj)
	h := rep.Span.Hours()
	check := func(name string, perHour, limit float64, unit string) {
		if perHour*h > limit {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s grew %.1f %s over %v (%.1f/h), limit %.1f", name, perHour*h, unit, rep.Span.Round(time.Second), perHour, limit))
		}
	}
	check("RSS", rep.RSSKiBPerHour, max(4096, 0.1*mean(rss)), "KiB")
	check("threads", rep.ThreadsPerHour, 2, "")
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
