package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/fielderr"
	"github.com/sanqos/sanqos/internal/observe/blkprobe"
	"github.com/sanqos/sanqos/internal/observe/discover"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/sdnotify"
)

// runOptions is everything 'sanqos run' (autonomic) needs, after parsing
// and validation.
type runOptions struct {
	config  config.Config
	engine  engine.Config
	fixed   bool // topo is given (--consumer): no discovery
	topo    topology.Topology
	backend throttle.Options
	// asked is the backend the configuration named when it was auto
	// (resolveBackend), "" otherwise; backendWhy says why backend is
	// the one that runs.
	asked       string
	backendWhy  string
	ports       []uint16
	listen      string
	socket      string
	record      string
	procRoot    string
	cleanupOnly bool
}

const runDescription = `Run the QoS daemon: every tick (100 ms) measure each shared resource's read
latency (every read timed in the kernel by the eBPF block-layer probe where
the kernel allows it, else /proc/diskstats' r_await; the mean, p95 or p99,
EWMA-filtered) and, while it is over the threshold, delay the TCP packets
the target sends to the resource's heavy writers (the throttleable set).
Nothing is throttled while the resource is healthy, and nothing is ever
dropped.

It serves /metrics (Prometheus) and /status (read by 'sanqos status' and
'sanqos top') on --listen, and the root-only control socket of 'sanqos
throttle' on --socket (manual overrides win over the controller).

Kernel objects (nfqueue backend): iptables/ip6tables chain SANQOS-<instance>
in the mangle table and ipsets sanqos-<instance>-*, in the current network
namespace; all removed on exit (Ctrl-C, SIGTERM, SIGHUP never exits) and at
the next start after a crash. Each instance (q<queue> by default) owns its
own objects and holds a lock; a second instance never touches them. --cleanup-only removes
them and exits; when the configuration is refused (a typo, a file others
can write), it warns and removes the objects of every dead instance. The dry-run backend only logs and needs no root.

--backend auto starts edt (tc/BPF departure times with fq on --dev) where
the kernel has fq, clsact, cls_bpf and BPF, --dev is given, --rate-dev is
another interface and ack_delay is on, and nfqueue otherwise (also when
edt would not start); the start log, 'sanqos status' and 'sanqos check'
say which and why.

Write delays hold the pure ACKs and the small segments that clock an iSCSI
writer (R2T, SCSI response); a flow's delay rises gradually so that the
writer's RTT estimate follows it. --ack-delay=false (config ack_delay =
false) holds only the small segments.

Read delays (--direction read or both) are exact only with TCP autocorking
off on the target (sysctl net.ipv4.tcp_autocorking=0): otherwise the tail of
a reply waits for its held first part and a 64 KiB read is delayed twice.

With --manual, sanqos serves manual throttles only: no discovery, no
controller (see 'sanqos run --manual --help').`

// runAutonomic is 'sanqos run' without --manual: the control loop and
// the data path.
func runAutonomic(ctx context.Context, o runOptions, log *slog.Logger, args []string) error {
	for _, w := range o.config.Warnings() {
		log.Warn(w)
	}
	if o.backend.Backend != "dry-run" && os.Geteuid() != 0 {
		return fmt.Errorf("the %s backend must run as root (it programs iptables, ipsets or qdiscs); use --backend dry-run to try it without", o.backend.Backend)
	}
	if o.cleanupOnly {
		return cleanupOnly(ctx, o, log)
	}
	resolveBackend(&o, hostSystem{})
	return runDaemon(ctx, o, log, args)
}

// cleanupOnly removes what a daemon (crashed or not) left in the kernel:
// opening a backend removes the leftovers of an earlier run, closing it
// removes what it installed itself.
//
// With backend auto it removes what auto's choice leaves here, and
// nfqueue's too when that is edt (a run may have fallen back from it).
func cleanupOnly(ctx context.Context, o runOptions, log *slog.Logger) error {
	resolveBackend(&o, hostSystem{})
	names := []string{o.backend.Backend}
	if o.asked == throttle.Auto && o.backend.Backend == "edt" {
		names = append(names, "nfqueue")
	}
	for _, name := range names {
		bo := o.backend
		bo.Backend = name
		b, err := throttle.Open(ctx, bo)
		if err != nil {
			return fmt.Errorf("removing the %s backend's leftovers: %w", name, err)
		}
		if err := b.Close(); err != nil {
			return fmt.Errorf("removing the %s backend's leftovers: %w", name, err)
		}
		log.Info("leftovers removed", "backend", b.Name())
	}
	return nil
}

// runDaemon starts the senses, the data path and the listeners around one
// daemon.Daemon and runs it until ctx ends.
func runDaemon(ctx context.Context, o runOptions, log *slog.Logger, args []string) error {
	sn, err := openSenses(&o, log)
	if err != nil {
		return err
	}
	defer sn.close()
	dopts, swap, err := daemonOptions(o, sn, log)
	if err != nil {
		return err
	}
	// What collides with another daemon comes before the kernel is
	// touched: the control socket. The HTTP address is not a reason to
	// stay down: it is bound in the background, retried while taken.
	srv, err := ctl.Listen(o.socket, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	if o.record != "" {
		rec, err := daemon.CreateRecordFile(o.record, int64(o.config.RecordMaxSize))
		if err != nil {
			return fmt.Errorf("creating the --record file (check its directory exists and is writable, or leave --record out): %w", err)
		}
		defer rec.Close()
		dopts.Recorder = rec
	}
	b, err := openBackend(ctx, &o, log)
	if err != nil {
		return err
	}
	wire := openWire(ctx, o, log)
	if wire != nil {
		defer wire.Close()
		dopts.Decider = daemon.WithWire(dopts.Decider, wire, o.topo, log)
	}
	overrides := &ctl.Overrides{}
	if err := overrides.SetReadRates(o.config.Manual.ReadRates, o.ports); err != nil {
		return errors.Join(err, b.Close())
	}
	dopts.Backend, dopts.BackendWhy, dopts.Overrides = b, o.backendWhy, overrides
	d, err := daemon.New(dopts)
	if err != nil {
		return errors.Join(err, b.Close())
	}
	r := &reloader{args: args, cur: o, d: d, disc: swap, log: log}
	if wire != nil {
		r.wire = wire // never a typed nil: reload tests r.wire against nil
	}
	return serve(ctx, o, d, srv, overrides, r)
}

// senses are what the daemon reads the devices through, opened once.
type senses struct {
	stats   *diskstats.FS
	closers []func() error
	probe   *daemon.Probe
}

func (s *senses) close() {
	for _, c := range slices.Backward(s.closers) {
		_ = c()
	}
}

// openSenses opens /proc/diskstats (kept open for the daemon's life) and,
// on the real /proc, the sysfs reads in flight and the eBPF block-layer
// probe, where the kernel allows it (it says once when it cannot and
// leaves the reads to diskstats). With another --proc (a fixture) only
// diskstats is read. It sets o.engine's sources.
func openSenses(o *runOptions, log *slog.Logger) (*senses, error) {
	s := &senses{stats: diskstats.NewFS(o.procRoot)}
	s.closers = append(s.closers, s.stats.Close)
	if _, _, err := s.stats.Read(); err != nil {
		s.close()
		return nil, fmt.Errorf("reading block device statistics (is %s a proc file system?): %w", o.procRoot, err)
	}
	live := o.procRoot == "/proc"
	if live {
		inFlight := diskstats.NewInFlightSnapshot(diskstats.NewInFlight("/sys"))
		s.closers = append(s.closers, inFlight.Close)
		o.engine.InFlight = inFlight
	}
	var open daemon.ProbeOpener
	if o.config.Probe != "off" && live {
		open = func(devs []string) (blkprobe.Sampler, error) { return blkprobe.Open(devs, blkprobe.Options{}) }
	}
	s.probe = daemon.NewProbe(open, log)
	s.closers = append(s.closers, s.probe.Close)
	s.probe.SetTopology(o.topo)
	o.engine.Fine = s.probe
	return s, nil
}

// daemonOptions builds the engine and the discovery of the daemon; the
// data path and the listeners are added by the caller.
func daemonOptions(o runOptions, sn *senses, log *slog.Logger) (daemon.Options, *swapDiscoverer, error) {
	eng, err := engine.New(o.engine, o.topo)
	if err != nil {
		return daemon.Options{}, nil, fmt.Errorf("configuration: %w", err)
	}
	dopts := daemon.Options{
		Clock: clock.Real{}, Tick: o.engine.Tick, Decider: daemon.FromEngine(eng, o.ports, sn.probe), Stats: sn.stats,
		Topology: o.topo, Logger: log, Version: version, DiscoveryInterval: o.config.Discovery.Interval.Duration,
	}
	if o.fixed {
		return dopts, nil, nil
	}
	d, err := discover.FromConfig(o.config, log)
	if err != nil {
		return daemon.Options{}, nil, fmt.Errorf("discovery: %w", err)
	}
	swap := &swapDiscoverer{} // a reload replaces it (reload.go)
	swap.set(withThresholds{d: d, c: o.config, log: log, warned: map[string]bool{}})
	dopts.Discoverer = swap
	return dopts, swap, nil
}

// serve runs the daemon with its HTTP listener, control socket, systemd
// watchdog and SIGHUP reloader beside it, and stops them all when it ends.
func serve(ctx context.Context, o runOptions, d *daemon.Daemon, srv *ctl.Server, overrides *ctl.Overrides, r *reloader) error {
	log := r.log
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	goWith := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	if o.listen != "" {
		goWith(func() {
			if err := daemon.ListenAndServe(sctx, o.listen, d.Handler(), daemon.DefaultHTTPLimits, log, 0); err != nil {
				log.Error("HTTP listener failed; /metrics and /status are gone, control goes on", "err", err)
			}
		})
	}
	goWith(func() {
		if err := srv.Serve(sctx, d.CtlHandler(overrides)); err != nil && sctx.Err() == nil {
			log.Error("control socket failed; manual overrides unavailable, control goes on", "err", err)
		}
	})
	// systemd (Type=notify, WatchdogSec): READY=1, WATCHDOG=1 only while
	// the loop ticks and the backend is healthy, RELOADING=1, STOPPING=1.
	notify, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("not talking to systemd", "err", err)
		notify = nil
	}
	wdctx, stopWatchdog := context.WithCancel(ctx) // ends on a signal, or when Run returns
	defer stopWatchdog()
	if notify.Enabled() {
		goWith(func() { d.Watchdog(wdctx, notify) })
	}
	r.notify = notify
	goWith(func() { r.loop(sctx) })
	log.Info("control socket ready", "socket", o.socket, "record", o.record)
	runErr := d.Run(ctx)
	stopWatchdog()
	stop()
	wg.Wait()
	return runErr
}

// withThresholds fills in the configured per-resource thresholds of every
// discovered topology.
type withThresholds struct {
	d      *discover.Discoverer
	c      config.Config
	log    *slog.Logger
	warned map[string]bool // [resources] keys already said to match nothing
}

func (w withThresholds) Discover(ctx context.Context) (topology.Topology, error) {
	t, err := w.d.Discover(ctx)
	if err != nil {
		return t, err
	}
	// A [resources."name"] the discovery does not find is a typo, or a
	// resource not yet there: said once per name, not every 5 s.
	for _, k := range discover.UnmatchedResources(t, w.c) {
		if !w.warned[k] && w.log != nil {
			w.log.Warn("a [resources] section names no discovered resource; its threshold is not used", "section", k)
		}
		w.warned[k] = true
	}
	return discover.ApplyThresholds(t, w.c), nil
}

// Unresolved passes on the LUNs discovery left out (daemon.UnresolvedReporter).
func (w withThresholds) Unresolved() []string { return w.d.Unresolved() }

// parseRunOptions reads the configuration file (--config), lets the flags
// override it and validates the result. Every problem is reported before
// anything is started.
func parseRunOptions(args []string, manual bool, stderr io.Writer) (runOptions, error) {
	usage, description := "sanqos run [--config FILE] [flags]", runDescription
	if manual {
		usage, description = "sanqos run --manual [--backend nfqueue] [--socket PATH] [flags]", manualDescription
	}
	c := config.Default()
	fs, x := newRunFlagSet(usage, description, stderr, &c)
	if err := parseFlags(fs, args); err != nil {
		return runOptions{}, err
	}
	if *x.configPath != "" {
		var err error
		if c, err = config.Load(*x.configPath); err != nil {
			return runOptions{}, fmt.Errorf("%w; nothing was started", err)
		}
	}
	// --consumer lists replace discovery: they count as the static adapter's
	// consumers for validation, and are used as given, without device
	// resolution.
	if len(x.consumers) > 0 {
		c.Static.Consumers = nil
		c.Discovery.Adapter = "static"
	}
	for _, k := range x.consumers {
		c.Static.Consumers = append(c.Static.Consumers, config.StaticConsumer{Resource: k.resource, Addr: k.c.Addr.String(), Device: k.c.Device})
	}
	// The file's syntax and the daemon's own keys (config), then what
	// each package the configuration is mapped onto refuses, in the keys
	// that set it (owners.go). The owners' checks of a configuration
	// whose syntax is refused would only add noise.
	if err := c.ApplyFlags(fs); err != nil {
		return runOptions{}, fmt.Errorf("bad configuration, nothing was started: %w", err)
	}
	var errs []error
	cfg, err := engineConfig(c)
	if err != nil {
		errs = append(errs, inKeys(c, *x.configPath, err))
	}
	bo, err := backendOptions(c, *x.small, flagSet(fs, "small-segment"))
	if err != nil {
		errs = append(errs, inKeys(c, *x.configPath, err))
	}
	if err := validateOwners(c, *x.configPath, cfg, bo); err != nil {
		errs = append(errs, err)
	}
	o := runOptions{
		config: c, engine: cfg, listen: c.Listen, socket: c.Socket, record: c.Record, procRoot: *x.proc,
		cleanupOnly: *x.cleanup, backend: bo,
	}
	for _, p := range c.Ports {
		o.ports = append(o.ports, uint16(p)) // validated: 1-65535
	}
	if manual {
		if len(x.consumers) > 0 {
			errs = append(errs, errors.New("--consumer: manual mode has no controller to give consumers to; leave --consumer out or drop --manual"))
		}
	} else if len(x.consumers) > 0 {
		o.fixed = true
		o.topo = discover.ApplyThresholds(x.consumers.topology(), c)
		// The [resources] sections' refusals (fields) are reported above,
		// in their keys.
		if _, other := fielderr.Split(engine.ValidateTopology(o.topo, cfg)); len(other) > 0 {
			errs = append(errs, fmt.Errorf("--consumer: %w", errors.Join(other...)))
		}
	} else if _, err := discover.NewAdapter(c); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return runOptions{}, fmt.Errorf("bad configuration, nothing was started: %w", errors.Join(errs...))
	}
	return o, nil
}

// runFlags are the flags of 'sanqos run' that are not configuration keys
// (config.RegisterFlags adds those): each is either meaningless in a file
// or has a file form of another shape (noFileKey in daemon_test.go).
type runFlags struct {
	configPath *string
	proc       *string
	small      *int
	cleanup    *bool
	manual     config.BoolFlag
	consumers  consumerFlag
}

// newRunFlagSet is run's flag set: one flag per configuration key, with
// c's values as defaults, and the flags in runFlags.
func newRunFlagSet(usage, description string, stderr io.Writer, c *config.Config) (*flag.FlagSet, *runFlags) {
	fs := newFlagSet("run", usage, description, stderr)
	x := &runFlags{}
	x.configPath = fs.String("config", "", "TOML configuration `file` (see deploy/sanqos.example.toml); flags override it")
	c.RegisterFlags(fs)
	x.proc = fs.String("proc", "/proc", "proc file system to read diskstats from")
	x.small = fs.Int("small-segment", throttle.DefaultSmallSegment, "largest TCP payload in bytes that counts as write-direction traffic (R2T, SCSI response); given, it applies to every port, else each known protocol port has its measured default (NFS 2049: 256) and small_segment.<port> overrides")
	x.cleanup = fs.Bool("cleanup-only", false, "remove the kernel objects a sanqos daemon left behind, then exit")
	// Parsed here only so that --help lists it: cmdRun has read the mode.
	fs.Var(&x.manual, "manual", "serve manual throttles only: no discovery, no controller (see 'sanqos run --manual --help')")
	fs.Var(&x.consumers, "consumer", "add a fixed `RESOURCE,ADDR,DEVICE` consumer (e.g. fs-lab,10.0.0.3,loop1), device taken as its kernel name; repeat for each; replaces discovery")
	return fs, x
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

var (
	_ daemon.UnresolvedReporter = withThresholds{}
	_ daemon.UnresolvedReporter = &swapDiscoverer{}
)
