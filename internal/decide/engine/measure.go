package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/decide/control"
	"github.com/sanqos/sanqos/internal/observe/latency"

	"github.com/sanqos/sanqos/internal/decide/smoothing"
)

// The signals a resource's controller can follow.
const (
	SignalMean = control.SignalMean
	SignalP95  = control.SignalP95
	SignalP99  = control.SignalP99
)

// Signals lists the valid Signal names.
func Signals() []string { return []string{SignalMean, SignalP95, SignalP99} }

// CheckSignal reports whether name is a signal the engine knows ("" is
// the default, mean).
func CheckSignal(name string) error {
	switch name {
	case "", SignalMean, SignalP95, SignalP99:
		return nil
	}
	return fmt.Errorf("signal %q: want %s", name, strings.Join(Signals(), ", "))
}

// The signal sources a decision names.
const (
	SourceDiskstats = "diskstats"
	SourceEBPF      = "ebpf"
)

// FineReads is one tick of the block-layer probe: the device's reads
// completed in the tick, the age of its oldest read in flight now (0:
// none) and how many reads it holds in flight. ok is false when the
// device is not probed.
type FineReads interface {
	TickReads(device string) (reads latency.Ops, oldest time.Duration, inFlight int, ok bool)
}

// InFlight reports the reads a device has in flight now (the kernel's
// /sys/class/block/DEV/inflight). ok is false when it cannot tell.
type InFlight interface {
	ReadsInFlight(device string) (n uint64, ok bool)
}

// Reads in flight (the measuring half of step 1, "Signal", in package
// control). A reader whose reads take longer than a tick completes none
// in most ticks, exactly when the disk is at its worst, so a tick without
// a completed read is classified per device: reads in flight that were
// already in flight a tick ago (no read of the device completed in
// between, so they are the same reads) add one read of their age so far,
// a lower bound of its latency, to the signal; reads in flight seen for
// the first time say nothing yet, and the tick counts as one without
// reads (the loop's idle hold).
const (
	// idleHold: see control.DefaultIdleHold.
	idleHold = control.DefaultIdleHold
	// pendingTrustMax: a read in flight longer than this is past the SCSI
	// layer's 30 s command timeout; an in-flight count that old is a
	// kernel's accounting leak, not a read, and is ignored rather than
	// throttling the writers forever.
	pendingTrustMax = 30 * time.Second
)

// updatePending classifies d's reads in flight for this Step (see
// "1. Signal" in package control); d.rates holds the Step's interval.
func (e *Engine) updatePending(d *device, now time.Time) {
	d.pending, d.pendingMs = false, 0
	if !d.sig || d.rates.Reads > 0 || d.cur.InProgress == 0 || e.cfg.InFlight == nil || d.fine {
		// A completed read restarts the proof: the reads in flight now may
		// be new ones. InProgress (reads and writes) 0 means none.
		d.pendingSince = time.Time{}
		return
	}
	if n, ok := e.cfg.InFlight.ReadsInFlight(d.name); !ok || n == 0 {
		d.pendingSince = time.Time{}
		return
	}
	if d.pendingSince.IsZero() {
		d.pendingSince = now
	}
	age := now.Sub(d.pendingSince)
	if age > pendingTrustMax {
		return
	}
	d.pending = true
	d.pendingMs = float64(age) / float64(time.Millisecond)
}

// checkOldest sets d.probeStuck when the probe's oldest read in flight
// would count (see measure) but the block layer counts fewer reads in
// flight on d than the probe holds. The probe's oldest read is taken only
// with the kernel's word: a slot the probe failed to free (a completion
// it missed) ages until its request is reused, and must not throttle
// anyone, also while the reader has another read in flight. The oldest
// slot is the likeliest to be the stale one. Only signal devices the
// probe measures are asked.
func (e *Engine) checkOldest(d *device) {
	d.probeStuck = false
	if !d.sig || !d.fine || !d.probeOK || !oldestCounts(&d.probe, d.oldest) || e.cfg.InFlight == nil {
		return
	}
	n, ok := e.cfg.InFlight.ReadsInFlight(d.name)
	d.probeStuck = ok && n < uint64(max(d.probeInFlight, 1))
}

// oldestCounts says whether the probe's oldest read in flight counts as
// a read of its age: when nothing completed, or it is older than the
// tick's slowest completed reads.
func oldestCounts(ops *latency.Ops, oldest time.Duration) bool {
	return oldest > 0 && (ops.Count == 0 || oldest > ops.Hist.Quantile(0.99))
}

// measure aggregates the tick's reads of r's signal devices into the raw
// value of r's signal: from the probe where it has the device, from
// /proc/diskstats otherwise (see "1. Signal" in package control for reads in flight). It
// fills rd's Reads, PendingMs, Signal, Source and the probe's statistics.
// ok is false when there was no read to measure.
func (e *Engine) measure(r *resource, rd *ResourceDecision) (raw float64, ok bool) {
	var agg smoothing.ReadLatency
	rd.Signal = r.signal
	clear(r.hist[:])
	var fineReads uint64
	var fineSum time.Duration
	fine, coarse := 0, 0
	for _, di := range r.sigDevs {
		d := &e.devs[di]
		if !d.valid {
			continue
		}
		if d.fine {
			if ops, oldest, ok := &d.probe, d.oldest, d.probeOK; ok {
				fine++
				fineReads += ops.Count
				fineSum += ops.Sum
				r.hist.AddHist(&ops.Hist)
				agg.AddMicros(ops.Count, ops.Sum.Microseconds())
				// The probe knows each read's issue time: a read in flight
				// counts by its age at once, no tick of proof needed,
				// when nothing completed or it is older than the tick's
				// slowest completed reads.
				if oldestCounts(ops, oldest) && !d.probeStuck {
					ms := float64(oldest) / float64(time.Millisecond)
					agg.AddPending(ms)
					r.hist.Add(oldest)
					rd.PendingMs = max(rd.PendingMs, ms)
				}
				continue
			}
		}
		if d.rates.Reads > 0 || d.pending {
			coarse++ // a device with nothing to say does not make the tick coarse
		}
		agg.Add(d.rates.Reads, d.rates.ReadMs)
		if d.pendingMs > 0 {
			agg.AddPending(d.pendingMs)
			rd.PendingMs = max(rd.PendingMs, d.pendingMs)
		}
	}
	rd.Reads = agg.Reads()
	rd.Source = SourceDiskstats
	if fine > 0 && coarse == 0 {
		rd.Source = SourceEBPF
	}
	if fineReads > 0 {
		rd.MeanMs = float64(fineSum) / float64(fineReads) / float64(time.Millisecond)
		rd.P95Ms = float64(r.hist.Quantile(0.95)) / float64(time.Millisecond)
		rd.P99Ms = float64(r.hist.Quantile(0.99)) / float64(time.Millisecond)
	}
	raw, ok = agg.Value()
	if ok && rd.Source == SourceEBPF && r.signal != SignalMean {
		q := 0.95
		if r.signal == SignalP99 {
			q = 0.99
		}
		raw = float64(r.hist.Quantile(q)) / float64(time.Millisecond)
	}
	return raw, ok
}

// updateFine decides whether the probe is trusted for d this tick. The
// block tracepoints see only request-based queues: a bio-based device
// (device-mapper, LVM, md) completes reads the probe never counts, so a
// device is measured by the probe only once it has counted reads there,
// and falls back to diskstats as soon as diskstats counts reads the probe
// did not (found live on LVM over dm-delay in the kernel lab).
func (e *Engine) updateFine(d *device) {
	d.probeOK = false
	if e.cfg.Fine == nil {
		return
	}
	ops, oldest, inFlight, ok := e.cfg.Fine.TickReads(d.name)
	d.probe, d.oldest, d.probeInFlight, d.probeOK = ops, oldest, inFlight, ok
	switch {
	case !ok:
		d.fine = false
	case ops.Count > 0:
		d.fine = true
	case d.rates.Reads > 0:
		d.fine = false
	}
}
