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
// second. On shutdown the backend removes everything it installed.
//
// The daemon keeps a snapshot of the last tick for /status, /metrics and
// the optional --record time series.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/internal/clock"
	"github.com/sanqos/sanqos/internal/diskstats"
	"github.com/sanqos/sanqos/internal/metrics"
	"github.com/sanqos/sanqos/internal/status"
	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
)

// Decider is the pure per-tick step (internal/engine behind an adapter, see
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

// Discoverer finds the current topology (internal/discover).
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
	statsFailing int // consecutive failed reads
	recordFailed bool
	holdUntil    time.Time // after a reload, keep the throttles in force until then

	mu          sync.Mutex // guards snap, disc and appliedView
	snap        status.Status
	disc        status.Discovery
	appliedView throttle.State // applied, for the control socket
}

type topoChange struct {
	topo topology.Topology
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
	d.snap = status.Status{
		Version: o.Version, Backend: o.Backend.Name(), StartedAt: d.started,
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
		DelayErrorP50Ms: ms(bs.DelayErrorP50), DelayErrorMaxMs: ms(bs.DelayErrorMax),
		PureAcks: bs.PureAcks, AcksPassed: bs.AcksPassed, Bypassed: bs.Bypassed, Takeovers: bs.Takeovers,
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

// discoveryLoop asks the discoverer every interval and hands a changed
// topology to the tick loop.
func (d *Daemon) discoveryLoop(ctx context.Context, last topology.Topology, haveLast bool) {
	t := d.o.Clock.NewTicker(d.o.DiscoveryInterval)
	defer t.Stop()
	failing := !haveLast // the first discovery, in Run, failed and said so
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		topo, ok := d.discover(ctx, last, failing)
		failing = !ok
		if !ok || (haveLast && topologyEqual(topo, last)) {
			continue
		}
		last, haveLast = topo, true
		// Newest wins: drop a change the tick loop has not taken yet.
		select {
		case <-d.topoCh:
		default:
		}
		d.topoCh <- topoChange{topo: topo}
	}
}

// discover runs one discovery and records its outcome. A failure is logged
// when a streak starts (failing false), not on every retry.
func (d *Daemon) discover(ctx context.Context, last topology.Topology, failing bool) (topology.Topology, bool) {
	topo, err := d.o.Discoverer.Discover(ctx)
	d.metrics.Discovered(err)
	now := d.o.Clock.Now()
	var unresolved []string
	if ur, ok := d.o.Discoverer.(UnresolvedReporter); ok && err == nil {
		unresolved = ur.Unresolved()
	}
	d.mu.Lock()
	if err != nil {
		d.disc.OK = false
		d.disc.LastError = err.Error()
		d.disc.Errors++
	} else {
		d.disc.OK = true
		d.disc.LastError = ""
		d.disc.LastSuccess = now
		d.disc.Unresolved = unresolved
	}
	d.mu.Unlock()
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down: not a discovery problem.
	case err != nil && !failing:
		d.log.Error("discovery failed; keeping the last good topology and retrying",
			"err", err, "resources", len(last.Resources), "retry_every", d.o.DiscoveryInterval)
	case err == nil && failing:
		d.log.Info("discovery recovered", "resources", len(topo.Resources))
	}
	return topo, err == nil
}

// swapTopology installs topo in the engine and logs what changed.
func (d *Daemon) swapTopology(topo topology.Topology) {
	diff := diffTopology(d.topo, topo)
	d.o.Decider.SetTopology(topo)
	d.topo = topo
	if diff.empty() {
		return
	}
	d.log.Info("topology changed", "resources", len(topo.Resources),
		"resources_added", diff.resAdded, "resources_removed", diff.resRemoved,
		"consumers_added", diff.conAdded, "consumers_removed", diff.conRemoved)
}

// tick is one control step at time now.
func (d *Daemon) tick(ctx context.Context, now time.Time) {
	began := time.Now() // wall time on purpose: this measures our own cost, not simulated time
	d.lastTick.Store(now.UnixNano())
	d.takeReload(now)
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
	state = d.holdThrottles(now, state)
	if d.o.Overrides != nil {
		state = mergeOverrides(state, d.o.Overrides.Groups())
	}
	applyErr := d.apply(ctx, state)

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
	}
}

// applyTimeout bounds one Apply: iptables waits up to a few seconds for
// the xtables lock; beyond 5 s something is wrong and the next tick retries.
const applyTimeout = 5 * time.Second

// apply hands s to the backend unless it is what the backend already has.
func (d *Daemon) apply(ctx context.Context, s throttle.State) error {
	if !d.needsResync && stateEqual(s, d.applied) {
		return nil
	}
	// A hung kernel call (a held xtables lock, say) must not stall the
	// loop for good: give up after applyTimeout and retry at the next tick.
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	err := d.o.Backend.Apply(actx, s)
	cancel()
	var refused *throttle.Refused
	if errors.As(err, &refused) {
		// The backend applied the rest (an IPv6 consumer on a tc backend,
		// say): the others are controlled; say what was left out when it
		// changes, not every tick.
		if msg := refused.Error(); msg != d.refused {
			d.log.Warn("the backend left part of the throttle state out; the rest is in force", "backend", d.o.Backend.Name(), "left_out", msg)
			d.refused = msg
		}
		err = nil
	} else if err == nil {
		d.refused = ""
	}
	d.metrics.Applied(err)
	if err != nil && ctx.Err() != nil {
		// Stopping: the apply was cut short, and Close removes everything.
		return err
	}
	if err != nil {
		d.needsResync = true
		if !d.applyFailing {
			d.log.Error("applying the throttle state failed; retrying every tick",
				"backend", d.o.Backend.Name(), "err", err)
		}
		d.applyFailing = true
		return err
	}
	if d.applyFailing {
		d.log.Info("throttle state applied again after failures", "backend", d.o.Backend.Name())
	}
	d.applyFailing = false
	d.needsResync = false
	d.applied = cloneState(s)
	d.mu.Lock()
	d.appliedView = d.applied
	d.mu.Unlock()
	return nil
}

// logTransitions logs, per resource, throttling engaged and released and
// changes of the throttleable set.
func (d *Daemon) logTransitions(rs []status.Resource) {
	if d.seen == nil {
		d.seen = make(map[string]bool, len(rs))
	}
	seen := d.seen
	clear(seen)
	for _, r := range rs {
		seen[r.Name] = true
		p, had := d.prev[r.Name]
		switch {
		case r.Throttling() && (!had || !p.Throttling()):
			d.log.Info("throttling engaged", "resource", r.Name, "signal_ms", round2(r.SignalMs),
				"threshold_ms", r.ThresholdMs, "delay_ms", round2(r.DelayMs), "members", r.Members)
		case !r.Throttling() && had && p.Throttling():
			d.log.Info("throttling released", "resource", r.Name, "signal_ms", round2(r.SignalMs),
				"threshold_ms", r.ThresholdMs)
		}
		if r.MissingDevices > 0 && (!had || p.MissingDevices == 0) {
			d.log.Warn("devices of a resource are missing from diskstats; measuring without them",
				"resource", r.Name, "missing", r.MissingDevices)
		}
		if slices.Equal(p.Members, r.Members) {
			// The common case, and the only one every tick: no allocation.
		} else if added, removed := diffStrings(p.Members, r.Members); len(added)+len(removed) > 0 {
			d.log.Info("throttleable set changed", "resource", r.Name, "added", added, "removed", removed,
				"members", len(r.Members))
		}
		d.prev[r.Name] = r
	}
	for name, p := range d.prev {
		if !seen[name] {
			if p.Throttling() {
				d.log.Info("throttling released", "resource", name, "reason", "resource left the topology")
			}
			delete(d.prev, name)
		}
	}
}

// saturation is how long a resource's delay has been at its limit with its
// read latency still over the threshold, and when that was last said.
type saturation struct {
	since, warned time.Time
}

const (
	// saturationWarnAfter is how long the delay must sit at its limit, with
	// the latency over the threshold, before the daemon says so: a burst
	// start reaches u_max for a moment without anything being wrong.
	saturationWarnAfter = 10 * time.Second
	// saturationWarnEvery keeps a workload that saturates every burst
	// from filling the log.
	saturationWarnEvery = 10 * time.Minute
)

// warnSaturation tells the administrator when a resource's controller
// runs out of delay: the writers need more than u_max_limit to bring the read
// latency down to the threshold, so the threshold is not being kept.
func (d *Daemon) warnSaturation(now time.Time, rs []status.Resource) {
	if d.saturated == nil {
		d.saturated = map[string]saturation{}
	}
	for _, r := range rs {
		s, had := d.saturated[r.Name]
		if !r.Saturated {
			if had && !s.since.IsZero() {
				s.since = time.Time{}
				d.saturated[r.Name] = s
			}
			continue
		}
		if s.since.IsZero() {
			s.since = now
		}
		if now.Sub(s.since) >= saturationWarnAfter && (s.warned.IsZero() || now.Sub(s.warned) >= saturationWarnEvery) {
			d.log.Warn("throttle delay at its limit and the read latency still over the threshold: the writers need more delay than pid.u_max_limit allows; raise it, or these writers cannot be held back by packet delay alone",
				"resource", r.Name, "signal_ms", round2(r.SignalMs), "threshold_ms", r.ThresholdMs,
				"u_max_ms", r.UMaxMs, "u_max_limit_ms", r.UMaxLimitMs, "for_s", round2(now.Sub(s.since).Seconds()))
			s.warned = now
		}
		d.saturated[r.Name] = s
	}
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// record writes the tick's time series line. A failing recorder is logged
// once and then left alone: the control loop matters more than the record.
func (d *Daemon) record(now time.Time, dec Decision) {
	if d.o.Recorder == nil || d.recordFailed {
		return
	}
	rec := status.Record{
		T:         now,
		TS:        float64(now.UnixNano()) / 1e9,
		Resources: make([]status.RecordResource, len(dec.Resources)),
		Consumers: dec.Consumers,
	}
	bs := d.o.Backend.Stats()
	rec.HoldErrorMaxMs, rec.Backlog = ms(bs.DelayErrorMax), bs.Backlog
	rec.YieldMaxMs, rec.WakeLateMaxMs = ms(bs.YieldMax), ms(bs.WakeLateMax)
	rec.Takeovers, rec.TakeoverMaxMs, rec.TakeoversDeclined = bs.Takeovers, ms(bs.TakeoverMax), bs.TakeoversDeclined
	for i, r := range dec.Resources {
		rec.Resources[i] = status.RecordResource{Name: r.Name, SignalMs: r.SignalMs, RawMs: r.RawMs,
			ThresholdMs: r.ThresholdMs, TargetMs: r.TargetMs, DelayMs: r.DelayMs, ControlMs: r.ControlMs, UMaxMs: r.UMaxMs,
			Saturated: r.Saturated, Held: r.Held, PendingMs: r.PendingMs, Signal: r.Signal, Source: r.Source,
			MeanMs: r.MeanMs, P95Ms: r.P95Ms, P99Ms: r.P99Ms, Reads: r.Reads, Members: len(r.Members)}
	}
	line, err := json.Marshal(rec)
	if err == nil {
		_, err = d.o.Recorder.Write(append(line, '\n'))
	}
	if err != nil {
		d.recordFailed = true
		d.log.Error("writing the record failed; recording stops, control goes on", "err", err)
	}
}

// mergeOverrides returns s with the manual groups added and their members
// taken out of s's groups, so no initiator is in two groups.
func mergeOverrides(s throttle.State, manual []throttle.Group) throttle.State {
	if len(manual) == 0 {
		return s
	}
	taken := make(map[netip.Addr]bool, len(manual))
	names := make(map[string]bool, len(manual))
	for _, g := range manual {
		names[g.Name] = true
		for _, m := range g.Members {
			taken[m] = true
		}
	}
	out := throttle.State{Groups: make([]throttle.Group, 0, len(s.Groups)+len(manual))}
	for _, g := range s.Groups {
		if names[g.Name] {
			// A manual group of the same name replaces it (a stale group of
			// a freed override in the release state, say).
			continue
		}
		if slices.ContainsFunc(g.Members, func(a netip.Addr) bool { return taken[a] }) {
			g.Members = slices.DeleteFunc(slices.Clone(g.Members), func(a netip.Addr) bool { return taken[a] })
		}
		out.Groups = append(out.Groups, g)
	}
	return throttle.State{Groups: append(out.Groups, manual...)}
}

// stateEqual compares two throttle states exactly (order included: the
// engine produces a stable order, and a reordering costs one idempotent
// Apply at most).
func stateEqual(a, b throttle.State) bool {
	return slices.EqualFunc(a.Groups, b.Groups, func(x, y throttle.Group) bool {
		return x.Name == y.Name && x.WriteDelay == y.WriteDelay && x.ReadDelay == y.ReadDelay &&
			slices.Equal(x.Members, y.Members) && slices.Equal(x.Ports, y.Ports)
	})
}

func cloneState(s throttle.State) throttle.State {
	c := throttle.State{Groups: make([]throttle.Group, len(s.Groups))}
	for i, g := range s.Groups {
		g.Members = slices.Clone(g.Members)
		g.Ports = slices.Clone(g.Ports)
		c.Groups[i] = g
	}
	return c
}

// diffStrings returns what is in cur but not old, and in old but not cur,
// each in the order of its slice.
func diffStrings(old, cur []string) (added, removed []string) {
	in := func(xs []string) map[string]bool {
		m := make(map[string]bool, len(xs))
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	inOld, inCur := in(old), in(cur)
	for _, s := range cur {
		if !inOld[s] {
			added = append(added, s)
		}
	}
	for _, s := range old {
		if !inCur[s] {
			removed = append(removed, s)
		}
	}
	return added, removed
}

type topoDiff struct {
	resAdded, resRemoved, conAdded, conRemoved []string
}

func (t topoDiff) empty() bool {
	return len(t.resAdded)+len(t.resRemoved)+len(t.conAdded)+len(t.conRemoved) == 0
}

func diffTopology(old, cur topology.Topology) topoDiff {
	keys := func(t topology.Topology) (res, con []string) {
		for _, r := range t.Resources {
			res = append(res, r.Name)
			for _, c := range r.Consumers {
				con = append(con, consumerKey(r.Name, c))
			}
		}
		return res, con
	}
	or, oc := keys(old)
	nr, nc := keys(cur)
	var d topoDiff
	d.resAdded, d.resRemoved = diffStrings(or, nr)
	d.conAdded, d.conRemoved = diffStrings(oc, nc)
	return d
}

func consumerKey(resource string, c topology.Consumer) string {
	return fmt.Sprintf("%s/%s@%s", c.Addr, c.Device, resource)
}

func topologyEqual(a, b topology.Topology) bool {
	return slices.EqualFunc(a.Resources, b.Resources, func(x, y topology.Resource) bool {
		return x.Name == y.Name && x.ThresholdMs == y.ThresholdMs && slices.Equal(x.Leaves, y.Leaves) &&
			slices.EqualFunc(x.Consumers, y.Consumers, consumerEqual)
	})
}

func consumerEqual(a, b topology.Consumer) bool {
	return a.Addr == b.Addr && a.Device == b.Device && a.Target == b.Target &&
		a.Backing == b.Backing && slices.Equal(a.IQNs, b.IQNs)
}
