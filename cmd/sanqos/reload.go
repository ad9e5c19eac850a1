package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/decide/engine"
	"github.com/sanqos/sanqos/internal/observe/discover"
	"github.com/sanqos/sanqos/internal/observe/topology"
	"github.com/sanqos/sanqos/internal/serve/sdnotify"
)

// reloader re-reads the configuration on SIGHUP with the command line the
// daemon was started with (flags still override the file), validates it
// exactly as 'sanqos run' does at start, and hands the daemon a new
// engine, which takes over the running one's state (daemon.Adopter):
// thresholds, gains, policy, ports and consumers change at the next tick;
// the signal, the delays in force and their ceilings go on. A bad
// configuration is refused with run's own error and the running one goes
// on. What is bound at start (addresses, backend, tick, the small-segment
// split of a port) needs a restart: restartOnly names it.
type reloader struct {
	args []string
	cur  runOptions
	d    *daemon.Daemon
	disc *swapDiscoverer // nil with a fixed topology (--consumer)
	log  *slog.Logger
	// notify hears RELOADING=1 and READY=1 around each reload (nil outside
	// systemd: a no-op).
	notify *sdnotify.Notifier
	wire   reloadWire // nil: no wire counters (see openWire)
}

// reloadWire is what a reload needs of the wire counters (*throttle.Wire):
// the loop samples them, and a reload of the ports moves them.
type reloadWire interface {
	daemon.WireSource
	SetPorts(ctx context.Context, ports []uint16, small map[uint16]int) error
}

func (r *reloader) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hangups:
		}
		if err := r.notify.Reloading(); err != nil {
			r.log.Warn("telling systemd we are reloading", "err", err)
		}
		err := r.reload(ctx)
		if err != nil {
			r.log.Error("SIGHUP: configuration refused; the running configuration stays", "err", err)
		}
		r.d.ReloadResult(err)
		// Refused or not, the daemon runs: systemd must not wait for it.
		if err := r.notify.Send("READY=1"); err != nil {
			r.log.Warn("telling systemd we are ready", "err", err)
		}
	}
}

func (r *reloader) reload(ctx context.Context) error {
	var msgs bytes.Buffer
	o, err := parseRunOptions(r.args, false, &msgs)
	if err != nil {
		if errors.Is(err, errUsage) {
			return errors.New(strings.TrimSpace(msgs.String()))
		}
		return err
	}
	keepChoice(r.cur, &o)
	if changed := restartOnly(r.cur, o); len(changed) > 0 {
		return fmt.Errorf("%s changed: restart sanqos to apply (systemctl restart sanqos); nothing was reloaded", strings.Join(changed, ", "))
	}
	// The sysfs reader of reads in flight and the probe are the running
	// daemon's.
	o.engine.InFlight, o.engine.Fine = r.cur.engine.InFlight, r.cur.engine.Fine
	probe, _ := o.engine.Fine.(*daemon.Probe)
	eng, err := engine.New(o.engine, o.topo)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	rl := daemon.Reload{Decider: daemon.FromEngine(eng, o.ports, probe)}
	if r.wire != nil {
		// No topology here: the loop gives the new engine its topology at
		// the tick, and with it the wire its clients. Setting them from
		// this goroutine would empty the sets the running sampler reads
		// (the discovered topology is the loop's) and reset every
		// client's counters.
		rl.Decider = daemon.WithWire(rl.Decider, r.wire, topology.Topology{}, r.log)
	}
	if o.fixed {
		rl.Topology = &o.topo
	} else {
		d, err := discover.FromConfig(o.config, r.log)
		if err != nil {
			return fmt.Errorf("discovery: %w", err)
		}
		r.disc.set(withThresholds{d: d, c: o.config, log: r.log, warned: map[string]bool{}})
		cfg := o.config
		rl.Adjust = func(t topology.Topology) topology.Topology {
			t.Resources = slices.Clone(t.Resources)
			for i := range t.Resources {
				t.Resources[i].ThresholdMs = 0 // a removed [resources] section falls back
			}
			return discover.ApplyThresholds(t, cfg)
		}
	}
	for _, w := range o.config.Warnings() {
		r.log.Warn(w)
	}
	if err := r.movePorts(ctx, o); err != nil {
		return err
	}
	r.d.Reload(rl)
	changed := config.Changed(r.cur.config, o.config)
	r.cur = o
	r.log.Info("SIGHUP: configuration read; it applies at the next tick", "changed", changed)
	return nil
}

// movePorts makes the wire counters count o's ports when they changed:
// otherwise the clients of a new port would count as not writing. A
// failure refuses the reload (the counters are put back).
func (r *reloader) movePorts(ctx context.Context, o runOptions) error {
	if r.wire == nil || slices.Equal(r.cur.ports, o.ports) {
		return nil
	}
	err := r.wire.SetPorts(ctx, o.ports, o.backend.SmallSegments)
	if err == nil {
		r.log.Info("wire counters follow the reloaded ports", "ports", o.ports)
		return nil
	}
	if berr := r.wire.SetPorts(ctx, r.cur.ports, r.cur.backend.SmallSegments); berr != nil {
		err = errors.Join(err, fmt.Errorf("putting the wire counters back on ports %v: %w", r.cur.ports, berr))
	}
	return fmt.Errorf("ports: the wire counters cannot follow them; nothing was reloaded: %w", err)
}

// restartOnly lists the settings that differ between a and b and are
// bound at start. The ports are not: the data path takes them from each
// throttle state, and the wire counters follow them (movePorts). Each
// port's small-segment split is: the running backend uses the splits it
// was started with, and its default split for a port it was not.
func restartOnly(a, b runOptions) []string {
	var out []string
	add := func(differ bool, name string) {
		if differ {
			out = append(out, name)
		}
	}
	add(a.listen != b.listen, "listen")
	add(a.socket != b.socket, "socket")
	add(a.record != b.record || a.config.RecordMaxSize != b.config.RecordMaxSize, "record")
	add(a.procRoot != b.procRoot, "--proc")
	add(a.engine.Tick != b.engine.Tick, "tick")
	ab, bb := a.backend, b.backend
	add(ab.Backend != bb.Backend, "backend")
	add(ab.Dev != bb.Dev, "--dev")
	add(ab.QueueNum != bb.QueueNum, "--queue-num")
	add(ab.SmallSegment != bb.SmallSegment, "--small-segment")
	add(ab.AckDelay != bb.AckDelay, "ack_delay")
	for _, p := range b.ports {
		if have, want := splitOf(ab, p), bb.SmallSegments[p]; have != want {
			out = append(out, fmt.Sprintf("small segment of port %d (running %d bytes, configured %d)", p, have, want))
		}
	}
	add(!slices.Equal(a.ports, b.ports) && len(b.config.Manual.ReadRates) > 0,
		"ports while manual.read_rates are set (the read rates hold the ports they started with)")
	add(ab.RateDev != bb.RateDev, "rate_dev")
	add(!maps.Equal(a.config.Manual.ReadRates, b.config.Manual.ReadRates), "manual.read_rates")
	add(a.fixed != b.fixed, "--consumer")
	add(a.config.WireOn() != b.config.WireOn(), "attribution (wire counters on or off)")
	return out
}

// splitOf is the small-segment split the backend opened with o uses for
// port: its own, else the backend's default (throttle.smallOf).
func splitOf(o throttle.Options, port uint16) int {
	if v, ok := o.SmallSegments[port]; ok {
		return v
	}
	if o.SmallSegment == 0 {
		return throttle.DefaultSmallSegment
	}
	return o.SmallSegment
}

// swapDiscoverer lets a reload replace the discoverer the daemon's
// discovery goroutine calls.
type swapDiscoverer struct {
	p atomic.Pointer[withThresholds]
}

func (s *swapDiscoverer) set(w withThresholds) { s.p.Store(&w) }

func (s *swapDiscoverer) Discover(ctx context.Context) (topology.Topology, error) {
	return s.p.Load().Discover(ctx)
}

// Unresolved passes on the LUNs discovery left out (daemon.UnresolvedReporter).
func (s *swapDiscoverer) Unresolved() []string { return s.p.Load().Unresolved() }
