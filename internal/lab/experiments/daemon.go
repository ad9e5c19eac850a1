package experiments

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/lab"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// Control is how a run is controlled.
type Control struct {
	// Controller is "" for no daemon at all, "none" for a daemon that only
	// observes and records, else a controller (pid, thesis).
	Controller string `json:"controller"`
	// ThresholdMs is the daemon's threshold (0 with no daemon).
	ThresholdMs float64 `json:"threshold_ms"`
	// Policy is "read-over-write" (default) or "manual" (protected b2,
	// throttle b3, b4, b5).
	Policy string `json:"policy,omitempty"`
	// UMaxMs is this run's pid u_max when the experiment's Gains leave it
	// at 0 (0: control.DefaultParams). A low threshold needs more delay
	// than the default 20 ms to hold 12 writers.
	UMaxMs float64 `json:"u_max_ms,omitempty"`
	// FixedDelayMs, with Controller "none", holds every packet that
	// clocks the writers (b3-b5) for this long through the whole run: a
	// manual throttle per writer ('sanqos throttle') on the observing
	// daemon, the frontier's static throttle.
	FixedDelayMs float64 `json:"fixed_delay_ms,omitempty"`
	// Signal is what the controller holds under the threshold (mean, p95,
	// p99); "" is the daemon's default, the mean.
	Signal string `json:"signal,omitempty"`
	// Schedule, with Controller "none", sets and frees manual throttles
	// at fixed times (thesis §5.2–5.4).
	Schedule []Step `json:"schedule,omitempty"`
	// Tenants are per-initiator terms (the daemon's [tenants]).
	Tenants []LabTenant `json:"tenants,omitempty"`
	// RulesOff are rules of pid's law switched off (pid.rules_off): the
	// ablation's lab column.
	RulesOff []string `json:"rules_off,omitempty"`
}

// uMaxMs is the u_max the run's daemon gets: the user's (Gains), else
// the run's own, else the default.
func (c Control) uMaxMs(g Gains) float64 {
	switch {
	case g.UMaxMs > 0:
		return g.UMaxMs
	case c.UMaxMs > 0:
		return c.UMaxMs
	}
	return control.DefaultParams().UMaxMs
}

// Gains are the pid controller's gains the experiment passes in the
// daemon's configuration (control's one gains type); zero fields keep
// control.DefaultGains.
type Gains = control.Gains

// label names a control for file names and legends.
func (c Control) label() string {
	switch c.Controller {
	case "":
		return "nodaemon"
	case "none":
		if c.FixedDelayMs > 0 {
			return fmt.Sprintf("fixed-%gms", c.FixedDelayMs)
		}
		return "none"
	}
	s := fmt.Sprintf("%s-%gms", c.Controller, c.ThresholdMs)
	if c.Signal != "" && c.Signal != "mean" {
		s = fmt.Sprintf("%s-%s-%gms", c.Controller, c.Signal, c.ThresholdMs)
	}
	if c.Policy == "manual" {
		s = "manual-" + s
	}
	for _, r := range c.RulesOff {
		s += "-no-" + r
	}
	return s
}

// ctlSocketDir holds the daemon's control socket during a run (a short
// path: unix socket paths are limited to 108 bytes, the output directory
// may be long). It carries this package's prefix and is removed after
// every run.
const ctlSocketDir = "/run/sanqos-exp"

// resourceName is the one shared resource of the lab when the daemon is
// given its consumers as flags.
const resourceName = "lab-emu"

// daemonConfig is the TOML configuration of the daemon for a run:
// discovery through the lab's tgtd, the nfqueue backend, the thesis's
// tick and EWMA, and the experiment's controller and gains. It is the
// daemon's own config.Config, with its defaults, marshalled: what the
// lab does not set is what a user's daemon would do.
func daemonConfig(c Control, g Gains, l labView, record string) string {
	cfg := config.Default()
	umax := c.uMaxMs(g)
	g = g.WithDefaults()
	cfg.PID.Kp, cfg.PID.Ti.Duration, cfg.PID.Td.Duration = g.Kp, g.Ti, g.Td
	cfg.PID.UMax.Duration = msDuration(umax)
	cfg.PID.RulesOff = c.RulesOff
	cfg.Policy = c.Policy
	if cfg.Policy == "" {
		cfg.Policy = "read-over-write"
	}
	cfg.Controller = c.Controller
	cfg.Signal = c.Signal
	if cfg.Signal == "" {
		cfg.Signal = "mean"
	}
	threshold := c.ThresholdMs
	if threshold == 0 {
		threshold = 15 // unused by controller none, still validated
	}
	cfg.Threshold.Duration = msDuration(threshold)
	cfg.Tick.Duration, cfg.EWMAAlpha = 100*time.Millisecond, 0.25
	cfg.Backend, cfg.Direction, cfg.Ports = "nfqueue", "write", []int{l.port}
	cfg.Listen, cfg.Socket, cfg.Record = "127.0.0.1:9469", filepath.Join(ctlSocketDir, "ctl.sock"), record
	cfg.Discovery.Adapter, cfg.Discovery.Interval.Duration, cfg.Discovery.TgtControlPort = "tgt", 5*time.Second, l.controlPort
	if l.nfs {
		// As a user configures NFS: the clients of the port from the
		// socket table, the export from ganesha's configuration, each
		// client's write rate from the wire.
		cfg.Discovery.Adapter, cfg.Discovery.TgtControlPort = "socket", config.Default().Discovery.TgtControlPort
		cfg.Attribution = "auto"
		// NFS's seconds scatter twice as far as a disk's (journal
		// commits in batches): a wider headroom, where the measured one
		// (since removed) settled in this experiment.
		cfg.Headroom = config.Headroom{Value: 0.25}
	}
	if cfg.Policy == "manual" {
		cfg.Manual.Protected, cfg.Manual.Throttle = []string{l.reader.addr}, l.writerAddrs()
	}
	if needsRates(c.Schedule) {
		cfg.RateDev = lab.TargetDev
	}
	var b strings.Builder
	b.WriteString("# sanqos configuration written by the lab experiment for one run.\n")
	if err := toml.NewEncoder(&b).Encode(cfg); err != nil {
		// A config.Config always encodes; this is a programming error.
		panic(fmt.Sprintf("encoding the daemon's configuration: %v", err))
	}
	b.WriteString(tenantsTOML(c.Tenants, l))
	return b.String()
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// daemonArgs are the arguments of `sanqos run` for a run: the
// configuration file (tgt discovery finds the lab's consumers) and the
// record to write. --socket repeats the file's value so that the command
// line shows the daemon is ours (see stopLeftoverDaemons).
func daemonArgs(cfgPath, record string) []string {
	return []string{"run", "--config", cfgPath, "--socket", filepath.Join(ctlSocketDir, "ctl.sock"), "--record", record}
}

// daemon is a sanqos daemon running in the target namespace.
type daemon struct {
	cmd    *exec.Cmd
	done   chan error
	record string
	argv   []string
}

// startDaemon starts `ip netns exec <target> sanqos …args` and waits until
// it records its first ticks, so the run's load meets a working daemon.
func startDaemon(ctx context.Context, sanqos string, args []string, record, logPath string) (*daemon, error) {
	if err := os.MkdirAll(ctlSocketDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", ctlSocketDir, err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the daemon's log: %w", err)
	}
	argv := append([]string{sanqos}, args...)
	cmd := lab.Command(context.WithoutCancel(ctx), lab.TargetNS, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting the daemon: %w", err)
	}
	d := &daemon{cmd: cmd, done: make(chan error, 1), record: record, argv: cmd.Args}
	go func() { d.done <- cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-d.done:
			d.done <- err
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the daemon exited at start (%v): %s", err, lastLines(string(log), 5))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if n, _ := countLines(record); n >= 3 {
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("the daemon recorded no ticks within 15s: %s", lastLines(string(log), 5))
		}
	}
}

// stop asks the daemon to exit (it removes its chain, sets and queue) and
// kills it if it has not within 10 s. It returns the daemon's exit error
// unless that was the interrupt itself.
func (d *daemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-d.done:
		d.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 130 {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		err := <-d.done
		d.done <- err
		return fmt.Errorf("the daemon did not stop within 10s on SIGINT and was killed")
	}
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		n++
	}
	return n, sc.Err()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// readRecord parses the daemon's --record file.
func readRecord(path string) ([]status.Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the daemon's record: %w", err)
	}
	defer f.Close()
	var out []status.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var r status.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A daemon killed mid-line leaves a torn last line.
			return out, nil
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// stopLeftoverDaemons stops daemons an earlier, crashed experiment left
// running (a daemon whose namespace was deleted under it lives on): they
// are recognised by their control socket in ctlSocketDir. The caller
// holds the lab, so no other experiment's daemon can be running.
func stopLeftoverDaemons(procRoot string) error {
	pids, err := leftoverDaemons(procRoot)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGINT)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := os.RemoveAll(ctlSocketDir); err != nil {
		return fmt.Errorf("removing %s: %w", ctlSocketDir, err)
	}
	return nil
}

// leftoverDaemons lists processes whose command line has a --socket in
// ctlSocketDir.
func leftoverDaemons(procRoot string) ([]int, error) {
	dirs, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	var out []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, d.Name(), "cmdline"))
		if err != nil {
			continue // gone, or not ours to read
		}
		if isOurDaemon(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			out = append(out, pid)
		}
	}
	return out, nil
}

func isOurDaemon(argv []string) bool {
	for i, a := range argv {
		v, ok := strings.CutPrefix(a, "--socket=")
		if !ok && a == "--socket" && i+1 < len(argv) {
			v, ok = argv[i+1], true
		}
		if ok && strings.HasPrefix(v, ctlSocketDir+"/") {
			return true
		}
	}
	return false
}

// setFixedDelay sets the manual write throttle of every writer host on
// the run's daemon, through its control socket, as an administrator
// would with 'sanqos throttle'.
func setFixedDelay(ctx context.Context, sanqos string, v labView, delayMs float64) ([]string, error) {
	var cmds []string
	for _, a := range v.writerAddrs() {
		argv := []string{sanqos, "throttle", "--socket", filepath.Join(ctlSocketDir, "ctl.sock"), "--ip", a,
			"--delay", strconv.FormatFloat(delayMs, 'f', -1, 64) + "ms", "--direction", "write", "--port", strconv.Itoa(v.port)}
		cmd := lab.Command(ctx, lab.TargetNS, argv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return cmds, fmt.Errorf("setting the fixed delay of %s: %w: %s", a, err, strings.TrimSpace(string(out)))
		}
		cmds = append(cmds, strings.Join(cmd.Args, " "))
	}
	return cmds, nil
}
