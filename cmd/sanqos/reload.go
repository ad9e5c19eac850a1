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

	"github.com/sanqos/sanqos/internal/daemon"
	"github.com/sanqos/sanqos/internal/discover"
	"github.com/sanqos/sanqos/internal/engine"
	"github.com/sanqos/sanqos/internal/sdnotify"
	"github.com/sanqos/sanqos/internal/throttle"
	"github.com/sanqos/sanqos/internal/topology"
)

// reloader re-reads the configuration on SIGHUP with the command line the
// daemon was started with (flags still override the file), validates it
// exactly as 'sanqos run' does at start, and hands the daemon a new
// engine: thresholds, gains, policy, ports and consumers change at the
// next tick, the data path and the throttles in force stay. A bad
// configuration is refused with run's own error and the running one goes
// on. What is bound at start (addresses, backend, tick) needs a restart.
type reloader struct {
	args []string
	cur  runOptions
	d    *daemon.Daemon
	disc *swapDiscoverer // nil with a fixed topology (--consumer)
	log  *slog.Logger
	// notify hears RELOADING=1 and READY=1 around each reload (nil outside
	// systemd: a no-op).
	notify *sdnotify.Notifier
	wire   *throttle.Wire // nil: no wire counters (see openWire)
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
		if err := r.reload(); err != nil {
			r.log.Error("SIGHUP: configuration refused; the running configuration stays", "err", err)
		}
		// Refused or not, the daemon runs: systemd must not wait for it.
		if err := r.notify.Send("READY=1"); err != nil {
			r.log.Warn("telling systemd we are ready", "err", err)
		}
	}
}

func (r *reloader) reload() error {
	var msgs bytes.Buffer
	o, err := parseRunOptions(r.args, false, &msgs)
	if err != nil {
		if errors.Is(err, errUsage) {
			return errors.New(strings.TrimSpace(msgs.String()))
		}
		return err
	}
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
		rl.Decider = daemon.WithWire(rl.Decider, r.wire, o.topo, r.log)
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
	r.d.Reload(rl)
	r.cur = o
	r.log.Info("SIGHUP: configuration read; it applies at the next tick")
	return nil
}

// restartOnly lists the settings that differ between a and b and are
// bound at start.
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
	add(ab.Backend != bb.Backend || ab.Dev != bb.Dev || ab.QueueNum != bb.QueueNum ||
		ab.SmallSegment != bb.SmallSegment || !maps.Equal(ab.SmallSegments, bb.SmallSegments) || ab.AckDelay != bb.AckDelay, "backend settings")
	add(ab.RateDev != bb.RateDev, "rate_dev")
	add(!maps.Equal(a.config.Manual.ReadRates, b.config.Manual.ReadRates), "manual.read_rates")
	add(a.fixed != b.fixed, "--consumer")
	add(a.config.WireOn() != b.config.WireOn(), "attribution (wire counters on or off)")
	return out
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
