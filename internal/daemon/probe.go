package daemon

import (
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/observe/blkprobe"
	"github.com/sanqos/sanqos/internal/observe/latency"
	"github.com/sanqos/sanqos/internal/observe/topology"
)

// ProbeOpener opens the block-layer probe on devices (blkprobe.Open in
// production, a fake in tests).
type ProbeOpener func(devices []string) (blkprobe.Sampler, error)

// Probe gives the engine each tick's reads from the eBPF block-layer probe
// (engine.FineReads): microsecond latencies with their histograms and the
// age of the oldest read in flight. It samples the probe once per tick and
// reopens it when the topology's devices change. Where eBPF cannot be used
// it says so once and gives nothing, so the engine measures from
// /proc/diskstats as before. Not safe for concurrent use: the loop's tick
// owns it.
type Probe struct {
	open ProbeOpener
	log  *slog.Logger
	s    blkprobe.Sampler
	devs []string // sorted: what s watches, or failed to watch
	// prev is the last sample, tick the difference to the one before;
	// valid says tick holds this tick's reads.
	prev, tick blkprobe.Snapshot
	valid      bool
	// unavailable is why eBPF cannot be used here; once set, the probe is
	// not tried again.
	unavailable string
	failing     bool // the last Sample failed (said once until it works)
}

// NewProbe returns a probe that opens with open on the first SetDevices;
// a nil open means eBPF is switched off (config probe = "off").
func NewProbe(open ProbeOpener, log *slog.Logger) *Probe {
	p := &Probe{open: open, log: log}
	if open == nil {
		p.unavailable = "switched off in the configuration (probe = \"off\")"
	}
	return p
}

// State is "ebpf" while the probe measures, else why it does not.
func (p *Probe) State() string {
	switch {
	case p == nil:
		return "not configured"
	case p.unavailable != "":
		return p.unavailable
	case p.s == nil:
		return "no devices yet"
	case p.failing:
		return "sampling failed"
	}
	return "ebpf"
}

// SetTopology makes the probe watch the devices of t's consumers.
func (p *Probe) SetTopology(t topology.Topology) { p.SetDevices(topologyDevices(t)) }

// SetDevices makes the probe watch devices (names as in /proc/diskstats),
// reopening it when they changed.
func (p *Probe) SetDevices(devices []string) {
	if p == nil || p.unavailable != "" {
		return
	}
	devs := slices.Clone(devices)
	slices.Sort(devs)
	devs = slices.Compact(devs)
	if slices.Equal(devs, p.devs) && (p.s != nil || len(devs) == 0) {
		return
	}
	p.closeSampler()
	p.devs = devs
	if len(devs) == 0 {
		return
	}
	s, err := p.open(devs)
	switch {
	case errors.Is(err, blkprobe.ErrUnavailable):
		p.unavailable = err.Error()
		p.log.Warn("measuring read latency from /proc/diskstats (millisecond counts, means only): the eBPF block-latency probe cannot run here", "reason", err)
	case err != nil:
		// A device the probe cannot resolve (it went away between
		// discovery and now): measure from diskstats until the next
		// topology change.
		p.log.Warn("the eBPF block-latency probe could not watch the devices; measuring them from /proc/diskstats until the topology changes", "devices", devs, "err", err)
	default:
		p.s = s
		p.log.Info("measuring read latency with the eBPF block-layer probe", "devices", devs)
	}
}

// Sample takes the tick's sample; call it once per tick before the
// engine's Step.
func (p *Probe) Sample(now time.Time) {
	if p == nil {
		return
	}
	p.valid = false
	if p.s == nil {
		return
	}
	snap, err := p.s.Sample(now)
	if err != nil {
		if !p.failing {
			p.log.Warn("sampling the eBPF probe failed; measuring from /proc/diskstats until it works", "err", err)
		}
		p.failing = true
		return
	}
	if p.failing {
		p.log.Info("sampling the eBPF probe works again")
	}
	p.failing = false
	p.tick = snap.Sub(p.prev)
	p.prev = snap
	p.valid = true
}

// TickReads is engine.FineReads: the device's reads completed in the
// tick, the age of its oldest read in flight and how many reads the
// probe holds in flight.
func (p *Probe) TickReads(device string) (latency.Ops, time.Duration, int, bool) {
	if p == nil || !p.valid {
		return latency.Ops{}, 0, 0, false
	}
	d, ok := p.tick.Devices[device]
	if !ok {
		return latency.Ops{}, 0, 0, false
	}
	return d.Read, d.OldestRead, d.ReadsInFlight, true
}

// Close detaches the probe.
func (p *Probe) Close() error {
	if p == nil {
		return nil
	}
	return p.closeSampler()
}

func (p *Probe) closeSampler() error {
	p.valid, p.failing = false, false
	p.prev, p.tick = blkprobe.Snapshot{}, blkprobe.Snapshot{}
	if p.s == nil {
		return nil
	}
	err := p.s.Close()
	p.s = nil
	return err
}

// topologyDevices lists the block devices of t's consumers.
func topologyDevices(t topology.Topology) []string {
	var devs []string
	for _, r := range t.Resources {
		for _, c := range r.Consumers {
			if c.Device != "" {
				devs = append(devs, c.Device)
			}
		}
	}
	return devs
}
