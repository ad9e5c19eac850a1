// Package daemon wires the sanqos control loop together and runs it: one
// ticker drives every resource; each tick reads /proc/diskstats once, steps
// the engine (signal, controller, throttleable sets) and hands the desired
// throttle state to the backend. Discovery runs on its own goroutine and a
// changed topology is swapped in at a tick boundary, so a step always sees
// one consistent topology.
//
// The data path is programmed kube-proxy style: the backend is called only
// when the desired state differs from the last one applied successfully; a
// failed apply marks the state as needing a full resync, which is retried at
// every tick, and is logged once per failure streak rather than ten times a
// second. What someone else removes from the kernel is read back and
// re-installed (repair.go). On shutdown the backend removes everything it
// installed.
//
// The daemon keeps a snapshot of the last tick for /status, /metrics and
// the optional --record time series, and adds up each tick's reads, read
// time and seconds over the threshold, throttled and saturated into the
// totals /metrics serves for SLOs (slo.go): a scrape sees one tick in
// 150, the totals see every one.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/observe/diskstats"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/metrics"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// Decider is the pure per-tick step (internal/decide/engine behind an adapter, see
// FromEngine). Step must not keep references into snap past the next call,
// and the Decision it returns belongs to the daemon.
type Decider interface {
	SetTopology(topology.Topology)
	Step(now time.Time, snap []diskstats.Stat) Decision
}

// Decision is what one step decided, in the shape the daemon reports and
// applies.
type Decision struct {
	Resources []status.Resource
	Consumers []status.Consumer
	// State is the complete throttle state the data path should have.
	State throttle.State
}

// Discoverer finds the current topology (internal/observe/discover).
type Discoverer interface {
	Discover(ctx context.Context) (topology.Topology, error)
}

// UnresolvedReporter is implemented by discoverers (*discover.Discoverer)
// that can say which backing stores their last discovery left out; the
// daemon then shows them in /status and /metrics.
type UnresolvedReporter interface {
	Unresolved() []string
}

// StatsSource reads the block device counters once per tick
// (*diskstats.FS). Malformed lines are skipped and counted, not fatal.
type StatsSource interface {
	Read() ([]diskstats.Stat, []diskstats.LineError, error)
}

// Overrides supplies manual throttle groups (*ctl.Overrides).
type Overrides interface {
	Groups() []throttle.Group
}

// Options configure a Daemon. Clock, Decider, Stats and Backend are required.
type Options struct {
	Clock clock.Clock
	// Tick is the control period; 100 ms when 0 (the thesis's period).
	Tick    time.Duration
	Decider Decider
	Stats   StatsSource
	// Backend programs the data path. It must allow Stats to be called
	// concurrently with Apply (the HTTP handlers read it).
	Backend throttle.Backend
	// BackendWhy says why Backend is the one (backend auto's choice),
	// for /status.
	BackendWhy string
	// Discoverer, when set, is asked for the topology at start and every
	// DiscoveryInterval (5 s when 0). Without it the engine keeps the
	// topology it was built with, given here as Topology for the logs.
	Discoverer        Discoverer
	DiscoveryInterval time.Duration
	Topology          topology.Topology
	// Logger receives the structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Recorder, when set, receives one JSON line (status.Record) per tick.
	Recorder io.Writer
	// Version is reported in /status and sanqos_build_info.
	Version string
	// Overrides, when set, are manual throttles (from the control socket)
	// merged into every tick's state. They win: an initiator with a manual
	// throttle is taken out of the controller's groups.
	Overrides Overrides
	// StatsFailRelease is how many consecutive failed diskstats reads the
	// daemon tolerates before it releases all throttling (fail open: a
	// daemon that cannot see the disks must not keep slowing anyone down).
	// 10 when 0: one second at the default tick.
	StatsFailRelease int
}

// Daemon is the running control loop.
type Daemon struct {
	o       Options
	log     *slog.Logger
	metrics *metrics.Metrics
	started time.Time

	topoCh chan topoChange // discovery → tick loop; newest wins

	reloadCh chan Reload // SIGHUP → tick loop; newest wins (reload.go)

	// The runtime tenant terms last given to termsDecider (terms.go).
	termsVersion uint64
	termsDecider Decider

	// Watchdog (watchdog.go): clock time of the last tick's start, in
	// UnixNano, written by the tick loop; ready and unhealthy are the
	// watchdog goroutine's own.
	lastTick         atomic.Int64
	ready, unhealthy bool

	// Owned by the tick loop.
	topo         topology.Topology
	prev         map[string]status.Resource // last tick's resources by name
	saturated    map[string]saturation      // resources whose delay sits at its limit
	refused      string                     // what the backend last left out of a state
	seen         map[string]bool            // scratch of logTransitions, reused
	applied      throttle.State             // last state applied successfully
	needsResync  bool                       // applied is not known to be in the kernel
	applyFailing bool
	renewFailing bool // the last Renew failed (edt)
	statsFailing int  // consecutive failed reads
	recordFailed bool

	rep repairState // self-repair of what the backend installed (repair.go)
	slo *sloTotals  // totals for /metrics, added up each tick (slo.go)

	mu          sync.Mutex // guards snap, disc and appliedView
	snap        status.Status
	disc        status.Discovery
	appliedView throttle.State // applied, for the control socket
}

// New checks the options and returns a daemon ready to Run.
func New(o Options) (*Daemon, error) {
	switch {
	case o.Clock == nil:
		return nil, errors.New("daemon: Options.Clock is required")
	case o.Decider == nil:
		return nil, errors.New("daemon: Options.Decider is required")
	case o.Stats == nil:
		return nil, errors.New("daemon: Options.Stats is required")
	case o.Backend == nil:
		return nil, errors.New("daemon: Options.Backend is required")
	case o.Tick < 0 || o.DiscoveryInterval < 0:
		return nil, fmt.Errorf("daemon: tick %v and discovery interval %v must be positive", o.Tick, o.DiscoveryInterval)
	}
	if o.Tick == 0 {
		o.Tick = 100 * time.Millisecond
	}
	if o.DiscoveryInterval == 0 {
		o.DiscoveryInterval = 5 * time.Second
	}
	if o.StatsFailRelease <= 0 {
		o.StatsFailRelease = 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	d := &Daemon{
		o:       o,
		log:     o.Logger,
		started: o.Clock.Now(),
		topoCh:  make(chan topoChange, 1),
		topo:    o.Topology,
		prev:    map[string]status.Resource{},
		// Nothing is known about the kernel at start: the first tick
		// applies whatever it decides, even an empty state.
		needsResync: true,
	}
	d.reloadCh = make(chan Reload, 1)
	d.metrics = metrics.New(d.Status)
	d.slo = newSLOTotals()
	d.slo.setTopology(o.Topology)
	d.metrics.SetSLO(d.slo.snapshot)
	d.metrics.ConfigLoaded(d.started)
	d.snap = status.Status{
		Version: o.Version, Backend: o.Backend.Name(), BackendWhy: o.BackendWhy, StartedAt: d.started,
		TickMs: float64(o.Tick) / float64(time.Millisecond),
	}
	if o.Discoverer == nil {
		// A fixed topology: "discovered" once, at start.
		d.disc = status.Discovery{OK: true, LastSuccess: d.started}
		d.metrics.Discovered(nil)
	}
	return d, nil
}

// Metrics returns the daemon's metrics (for its HTTP handler).
func (d *Daemon) Metrics() *metrics.Metrics { return d.metrics }

// ReloadResult records the outcome of a configuration reload (SIGHUP):
// nil when the new configuration was handed to the loop, else why it was
// refused. The loop itself never refuses a Reload.
func (d *Daemon) ReloadResult(err error) { d.metrics.Reloaded(err, d.o.Clock.Now()) }

// Status returns a copy of the state of the last tick, with the backend's
// current data-path counters.
func (d *Daemon) Status() status.Status {
	d.mu.Lock()
	s := d.snap
	s.Resources = slices.Clone(s.Resources)
	s.Consumers = slices.Clone(s.Consumers)
	s.Discovery = d.disc
	d.mu.Unlock()
	s.UptimeS = d.o.Clock.Now().Sub(d.started).Seconds()
	bs := d.o.Backend.Stats()
	s.Throttle = status.BackendStats{
		PacketsHeld: bs.PacketsHeld, PacketsPassed: bs.PacketsPassed, Backlog: bs.Backlog,
		DelayErrorP50Ms: ms(bs.DelayErrorP50), DelayErrorMaxMs: ms(bs.DelayErrorMax), DelayErrorAvgMs: ms(bs.DelayErrorAvg),
		PureAcks: bs.PureAcks, AcksPassed: bs.AcksPassed, Bypassed: bs.Bypassed, Dropped: bs.Dropped, Errors: bs.Errors, Takeovers: bs.Takeovers,
	}
	for _, c := range bs.Bypassers {
		s.Throttle.Bypassers = append(s.Throttle.Bypassers, status.ConsumerBypass{Addr: c.Addr.String(), Held: c.Held, Delayed: c.Delayed, Bypassed: c.Bypassed})
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Run runs the loop until ctx is cancelled, then closes the backend (which
// removes everything it installed) and returns. The error is nil on a clean
// shutdown.
func (d *Daemon) Run(ctx context.Context) (err error) {
	defer func() {
		if cerr := d.o.Backend.Close(); cerr != nil {
			d.log.Error("removing the throttle state failed; run 'sanqos run --cleanup-only'", "backend", d.o.Backend.Name(), "err", cerr)
			err = errors.Join(err, fmt.Errorf("closing backend %s: %w", d.o.Backend.Name(), cerr))
		} else {
			d.log.Info("throttle state removed", "backend", d.o.Backend.Name())
		}
	}()

	var wg sync.WaitGroup
	dctx, stopDiscovery := context.WithCancel(ctx)
	defer func() {
		stopDiscovery()
		wg.Wait()
	}()
	if d.o.Discoverer != nil {
		// The first discovery runs before the first tick so that the loop
		// starts with a topology; if it fails the loop starts empty and
		// the discovery goroutine keeps trying.
		last, ok := d.discover(ctx, topology.Topology{}, false)
		if ok {
			d.swapTopology(last)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.discoveryLoop(dctx, last, ok)
		}()
	}

	wg.Add(1)
	go func(targets []*verifyTarget) {
		defer wg.Done()
		d.verifyLoop(dctx, targets)
	}(d.verifyTargets())

	d.log.Info("sanqos daemon started", "tick", d.o.Tick, "backend", d.o.Backend.Name(),
		"resources", len(d.topo.Resources), "version", d.o.Version)
	t := d.o.Clock.NewTicker(d.o.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.log.Info("sanqos daemon stopping", "reason", context.Cause(ctx))
			return nil
		case now := <-t.C():
			d.tick(ctx, now)
		}
	}
}

// tick is one control step at time now.
func (d *Daemon) tick(ctx context.Context, now time.Time) {
	began := time.Now() // wall time on purpose: this measures our own cost, not simulated time
	d.lastTick.Store(now.UnixNano())
	d.takeReload(now)
	d.takeTerms()
	select {
	case c := <-d.topoCh:
		d.swapTopology(c.topo)
	default:
	}

	snap, bad, err := d.o.Stats.Read()
	if len(bad) > 0 {
		d.metrics.StatsErrors(len(bad))
	}
	if err != nil {
		d.statsFailed(ctx, err)
		return
	}
	if d.statsFailing > 0 {
		d.log.Info("diskstats readable again", "failed_ticks", d.statsFailing)
		d.statsFailing = 0
	}

	dec := d.o.Decider.Step(now, snap)
	d.logTransitions(dec.Resources)
	d.warnSaturation(now, dec.Resources)
	state := dec.State
	var manual []throttle.Group
	if d.o.Overrides != nil {
		manual = d.o.Overrides.Groups()
		state = mergeOverrides(state, manual)
	}
	applyErr := d.apply(ctx, state)
	// The decision is the Decider's; the snapshot's copy carries what is
	// in force (a Decider may hand out the same slice every tick).
	dec.Resources = slices.Clone(dec.Resources)
	inForce(dec.Resources, d.applied)
	dec.Consumers = slices.Clone(dec.Consumers)
	consumersInForce(dec.Consumers, throttle.InForce(d.o.Backend, d.applied))
	d.slo.observe(d.o.Tick, snap, dec.Resources, d.o.Decider, manual)

	elapsed := time.Since(began)
	d.metrics.ObserveTick(elapsed)
	d.mu.Lock()
	d.snap.Ticks++
	d.snap.At = now
	d.snap.LastTickMs = ms(elapsed)
	d.snap.Resources = dec.Resources
	d.snap.Consumers = dec.Consumers
	d.snap.StatsError = ""
	d.snap.ApplyError = ""
	if applyErr != nil {
		d.snap.ApplyError = applyErr.Error()
	}
	d.mu.Unlock()
	d.record(now, dec)
}

// statsFailed handles a tick without diskstats: nothing can be decided, so
// the last state stays for a moment; a persisting failure releases all
// throttling.
func (d *Daemon) statsFailed(ctx context.Context, err error) {
	d.metrics.StatsErrors(1)
	d.statsFailing++
	d.mu.Lock()
	d.snap.StatsError = err.Error()
	d.mu.Unlock()
	if d.statsFailing == 1 {
		d.log.Error("reading diskstats failed; holding the throttle state", "err", err,
			"release_after_ticks", d.o.StatsFailRelease)
	}
	if d.statsFailing == d.o.StatsFailRelease {
		d.log.Warn("diskstats still unreadable; releasing all throttling until they are back", "failed_ticks", d.statsFailing)
	}
	if d.statsFailing >= d.o.StatsFailRelease {
		// Manual throttles were asked for by a person and stay.
		var empty throttle.State
		for _, g := range d.applied.Groups {
			empty.Groups = append(empty.Groups, throttle.Group{Name: g.Name, Ports: g.Ports})
		}
		if d.o.Overrides != nil {
			empty = mergeOverrides(empty, d.o.Overrides.Groups())
		}
		d.apply(ctx, empty)
		d.mu.Lock()
		d.snap.Resources = slices.Clone(d.snap.Resources)
		inForce(d.snap.Resources, d.applied)
		d.snap.Consumers = slices.Clone(d.snap.Consumers)
		consumersInForce(d.snap.Consumers, throttle.InForce(d.o.Backend, d.applied))
		d.mu.Unlock()
	}
}
