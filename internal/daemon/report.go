package daemon

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/sanqos/sanqos/internal/serve/status"
)

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
		switch {
		case r.Conflict != "" && (!had || p.Conflict == ""):
			d.log.Warn("tenant conflict: the reservations and the read promise cannot both be met",
				"resource", r.Name, "conflict", r.Conflict)
		case r.Conflict == "" && had && p.Conflict != "":
			d.log.Info("tenant conflict over", "resource", r.Name)
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
			ThresholdMs: r.ThresholdMs, ThresholdBy: r.ThresholdBy, Conflict: r.Conflict, TargetMs: r.TargetMs, DelayMs: r.DelayMs, ControlMs: r.ControlMs, InForceMs: r.InForceMs, UMaxMs: r.UMaxMs,
			Saturated: r.Saturated, Futile: r.Futile, Probing: r.Probing, GainMsPerMs: r.GainMsPerMs, RelapseMs: r.RelapseMs, RecallMs: r.RecallMs, Held: r.Held, PendingMs: r.PendingMs, Signal: r.Signal, Source: r.Source,
			MeanMs: r.MeanMs, P95Ms: r.P95Ms, P99Ms: r.P99Ms, Reads: r.Reads, Members: len(r.Members),
			Armed: len(r.Returning)}
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
