package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/ctl"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/diskstats"
	"github.com/sanqos/sanqos/internal/engine"
	"github.com/sanqos/sanqos/internal/status"
	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
)

// runOptions is everything 'sanqos run' (autonomic) needs, after parsing
// and validation.
type runOptions struct {
	engine      engine.Config
	topo        topology.Topology
	backend     throttle.Options
	ports       []uint16
	listen      string
	socket      string
	record      string
	procRoot    string
	cleanupOnly bool
}

const runDescription = `Run the QoS daemon: every tick (100 ms) read /proc/diskstats, compute each
shared resource's read latency (r_await, EWMA-filtered) and, while it is over
the threshold, delay the TCP packets the target sends to the resource's
heavy writers (the throttleable set). Nothing is throttled while the
resource is healthy, and nothing is ever dropped.

It serves /metrics (Prometheus) and /status (read by 'sanqos status' and
'sanqos top') on --listen, and the root-only control socket of 'sanqos
throttle' on --socket (manual overrides win over the controller).

Kernel objects (nfqueue backend): iptables chain SANQOS in the mangle table
and ipsets sanqos-*, in the current network namespace; all removed on exit
(Ctrl-C, SIGTERM) and at the next start after a crash. --cleanup-only removes
them and exits. The dry-run backend only logs and needs no root.`

// cmdRunAutonomic is 'sanqos run' without --manual: the control loop and
// the data path. run.go delegates here.
func cmdRunAutonomic(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseRunOptions(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	o.backend.Logger = log
	if o.backend.Backend != "dry-run" && os.Geteuid() != 0 {
		return fmt.Errorf("the %s backend must run as root (it programs iptables, ipsets or qdiscs); use --backend dry-run to try it without", o.backend.Backend)
	}
	if o.cleanupOnly {
		return cleanupOnly(ctx, o, log)
	}
	return runDaemon(ctx, o, log)
}

// cleanupOnly removes what a daemon (crashed or not) left in the kernel:
// opening a backend removes the leftovers of an earlier run, closing it
// removes what it installed itself.
func cleanupOnly(ctx context.Context, o runOptions, log *slog.Logger) error {
	b, err := throttle.Open(ctx, o.backend)
	if err != nil {
		return fmt.Errorf("removing the %s backend's leftovers: %w", o.backend.Backend, err)
	}
	if err := b.Close(); err != nil {
		return fmt.Errorf("removing the %s backend's leftovers: %w", o.backend.Backend, err)
	}
	log.Info("leftovers removed", "backend", b.Name())
	return nil
}

func runDaemon(ctx context.Context, o runOptions, log *slog.Logger) error {
	stats := diskstats.NewFS(o.procRoot)
	if _, _, err := stats.Read(); err != nil {
		return fmt.Errorf("reading block device statistics (is %s a proc file system?): %w", o.procRoot, err)
	}
	eng, err := engine.New(o.engine, o.topo)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}

	// Everything that can collide with another daemon comes before the
	// kernel is touched: the HTTP address and the control socket.
	l, err := daemon.Listen(o.listen)
	if err != nil {
		return err
	}
	defer l.Close()
	var srv *ctl.Server
	if o.socket != "" {
		if srv, err = ctl.Listen(o.socket, log); err != nil {
			return err
		}
		defer srv.Close()
	}
	var rec *os.File
	if o.record != "" {
		if rec, err = os.Create(o.record); err != nil {
			return fmt.Errorf("--record: %w", err)
		}
		defer rec.Close()
	}

	b, err := throttle.Open(ctx, o.backend)
	if err != nil {
		return fmt.Errorf("starting the %s backend: %w", o.backend.Backend, err)
	}
	overrides := &ctl.Overrides{}
	dopts := daemon.Options{
		Clock: clock.Real{}, Tick: o.engine.Tick, Engine: daemon.FromEngine(eng, o.ports), Stats: stats,
		Backend: b, Topology: o.topo, Logger: log, Version: version, Overrides: overrides,
	}
	if rec != nil {
		dopts.Recorder = rec
	}
	d, err := daemon.New(dopts)
	if err != nil {
		b.Close()
		return err
	}

	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var serveErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := daemon.Serve(sctx, l, d.Handler()); err != nil {
			serveErr = err
			log.Error("HTTP listener failed; /metrics and /status are gone, control goes on", "err", err)
		}
	}()
	if srv != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(sctx, d.CtlHandler(overrides)); err != nil && sctx.Err() == nil {
				log.Error("control socket failed; manual overrides unavailable, control goes on", "err", err)
			}
		}()
	}
	log.Info("serving", "metrics", "http://"+l.Addr().String()+"/metrics", "status", "http://"+l.Addr().String()+"/status",
		"socket", o.socket, "record", o.record)
	runErr := d.Run(ctx)
	stop()
	wg.Wait()
	_ = serveErr // already logged; the daemon's own exit status is what matters
	return runErr
}

// parseRunOptions parses and validates the flags of autonomic mode. Every
// problem is reported at once, before anything is started.
func parseRunOptions(args []string, stderr io.Writer) (runOptions, error) {
	fs := newFlagSet("run", "sanqos run [flags]", runDescription, stderr)
	def := engine.DefaultConfig()
	tick := fs.Duration("tick", def.Tick, "control period")
	alpha := fs.Float64("ewma-alpha", def.Alpha, "weight of the newest sample in the read-latency EWMA (0 < α ≤ 1)")
	threshold := fs.Float64("threshold", def.Control.ThresholdMs, "read latency (ms) to keep each resource under")
	controller := fs.String("controller", def.Controller, "controller: pid, thesis or none")
	umax := fs.Float64("u-max", def.Control.UMaxMs, "largest packet delay (ms)")
	join := fs.Float64("write-threshold", def.JoinKBs, "write rate (kB/s, EWMA) over which a consumer joins the throttleable set")
	leave := fs.Float64("write-leave", def.LeaveKBs, "write rate (kB/s) under which it leaves again")
	direction := fs.String("direction", def.Direction.String(), "what the delay slows: write, read or both")
	backend := fs.String("backend", "nfqueue", "data path: "+strings.Join(throttle.Backends, ", "))
	dev := fs.String("dev", "", "interface towards the initiators (netem and htb backends)")
	queue := fs.Uint("queue-num", uint(throttle.DefaultQueueNum), "NFQUEUE number (nfqueue backend)")
	ports := fs.String("ports", "3260", "comma-separated target TCP ports to throttle")
	listen := fs.String("listen", status.DefaultAddr, "address of the /metrics and /status HTTP listener")
	socket := fs.String("socket", ctl.DefaultSocket, "control socket path for 'sanqos throttle' (empty: none)")
	record := fs.String("record", "", "write one JSON line per tick (signals, delays, rates) to this file")
	proc := fs.String("proc", "/proc", "proc file system to read diskstats from")
	cleanup := fs.Bool("cleanup-only", false, "remove the kernel objects a sanqos daemon left behind, then exit")
	var consumers consumerFlag
	fs.Var(&consumers, "consumer", "add a static `RESOURCE,ADDR,DEVICE` consumer (e.g. fs-lab,10.0.0.3,loop1); repeat for each")
	if err := parseFlags(fs, args); err != nil {
		return runOptions{}, err
	}

	cfg := def
	cfg.Tick, cfg.Alpha, cfg.Controller = *tick, *alpha, *controller
	cfg.Control.ThresholdMs, cfg.Control.UMaxMs = *threshold, *umax
	cfg.JoinKBs, cfg.LeaveKBs = *join, *leave
	var errs []error
	d, err := throttle.ParseDirection(*direction)
	if err != nil {
		errs = append(errs, fmt.Errorf("--direction: %w", err))
	}
	cfg.Direction = d
	if *threshold <= 0 {
		errs = append(errs, fmt.Errorf("--threshold %v: want a positive number of ms, e.g. 15", *threshold))
	}
	if *umax <= 0 {
		errs = append(errs, fmt.Errorf("--u-max %v: want a positive number of ms, e.g. 20", *umax))
	}
	if *leave > *join {
		errs = append(errs, fmt.Errorf("--write-leave %v is above --write-threshold %v: a consumer would leave the set before joining it", *leave, *join))
	}
	if *queue == 0 || *queue > 65535 {
		errs = append(errs, fmt.Errorf("--queue-num %d: want 1 to 65535", *queue))
	}
	ps, err := parseRunPorts(*ports)
	if err != nil {
		errs = append(errs, err)
	}
	topo := consumers.topology()
	if err := engine.ValidateTopology(topo, cfg); err != nil {
		errs = append(errs, fmt.Errorf("--consumer: %w", err))
	}
	if _, err := engine.New(cfg, topology.Topology{}); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return runOptions{}, fmt.Errorf("bad configuration, nothing was started: %w", errors.Join(errs...))
	}
	return runOptions{
		engine: cfg, topo: topo, ports: ps, listen: *listen, socket: *socket, record: *record, procRoot: *proc,
		cleanupOnly: *cleanup,
		backend:     throttle.Options{Backend: *backend, Dev: *dev, QueueNum: uint16(*queue)},
	}, nil
}

func parseRunPorts(s string) ([]uint16, error) {
	var ps []uint16
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("--ports %q: want comma-separated TCP ports 1-65535, e.g. 3260", s)
		}
		ps = append(ps, uint16(p))
	}
	return ps, nil
}

// consumerFlag collects --consumer RESOURCE,ADDR,DEVICE.
type consumerFlag []struct {
	resource string
	c        topology.Consumer
}

func (f *consumerFlag) String() string { return "" }

func (f *consumerFlag) Set(v string) error {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return fmt.Errorf("want RESOURCE,ADDR,DEVICE, e.g. fs-lab,10.0.0.3,loop1")
	}
	a, err := netip.ParseAddr(strings.TrimSpace(parts[1]))
	if err != nil {
		return fmt.Errorf("address %q: %w", parts[1], err)
	}
	*f = append(*f, struct {
		resource string
		c        topology.Consumer
	}{strings.TrimSpace(parts[0]), topology.Consumer{Addr: a.Unmap(), Device: strings.TrimPrefix(strings.TrimSpace(parts[2]), "/dev/")}})
	return nil
}

func (f consumerFlag) topology() topology.Topology {
	var t topology.Topology
	idx := map[string]int{}
	for _, c := range f {
		i, ok := idx[c.resource]
		if !ok {
			i = len(t.Resources)
			idx[c.resource] = i
			t.Resources = append(t.Resources, topology.Resource{Name: c.resource})
		}
		t.Resources[i].Consumers = append(t.Resources[i].Consumers, c.c)
	}
	return t
}
