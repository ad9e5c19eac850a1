package daemon

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// Self-repair. The tick loop hands the backend a state only when it
// changes, and the backend touches the kernel only where its memory of
// what it installed differs, so a flush by another tool (a firewall
// reload's `iptables -t mangle -F POSTROUTING`, `nft flush ruleset`,
// `ipset flush`) would switch throttling off for good while /status
// still showed it (audit N1). A goroutine of its own, off the tick and
// the packet path, has a throttle.Verifier backend read back what it
// installed every verifyEvery; on drift it logs what changed once,
// counts it, and asks the tick loop to re-apply, which re-installs
// everything (the verifier made the backend forget what it installed).
// Every resyncEvery it has everything re-installed whatever it found,
// as kube-proxy does, against what the read-back does not look at.
const (
	verifyEvery = 5 * time.Second
	resyncEvery = 60 * time.Second
)

// repairState is the tick loop's view of self-repair.
type repairState struct {
	// req asks the tick loop to re-apply the state even though it has
	// not changed; the loop takes it at its next tick.
	req atomic.Bool
}

// verifyTarget is one thing read back: the backend, or the wire
// counters (which repair themselves in Verify). Owned by verifyLoop.
type verifyTarget struct {
	name    string
	v       throttle.Verifier
	reapply bool   // its drift is repaired by the next Apply (the backend)
	last    string // drift of the last look, reported already
	failing bool   // the last read-back failed
}

// verifyTargets lists what verifyLoop reads back. It runs on the tick
// loop's goroutine, before the loop: a reload may swap the Decider, but
// it keeps the same wire counters.
func (d *Daemon) verifyTargets() []*verifyTarget {
	var out []*verifyTarget
	if v, ok := d.o.Backend.(throttle.Verifier); ok {
		out = append(out, &verifyTarget{name: d.o.Backend.Name(), v: v, reapply: true})
	}
	if a, ok := d.o.Decider.(*engineAdapter); ok && a.wire != nil {
		if v, ok := a.wire.src.(throttle.Verifier); ok {
			out = append(out, &verifyTarget{name: "wire counters", v: v})
		}
	}
	return out
}

// verifyLoop runs until ctx ends; a backend that is no Verifier
// (dry-run) has nothing to read back.
func (d *Daemon) verifyLoop(ctx context.Context, targets []*verifyTarget) {
	if len(targets) == 0 {
		return
	}
	t := d.o.Clock.NewTicker(verifyEvery)
	defer t.Stop()
	lastFull := d.o.Clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			full := now.Sub(lastFull) >= resyncEvery
			if full {
				lastFull = now
			}
			for _, vt := range targets {
				d.verifyOnce(ctx, vt, full)
			}
		}
	}
}

// verifyOnce reads vt back once; with full it has everything re-installed
// whatever it finds.
func (d *Daemon) verifyOnce(ctx context.Context, vt *verifyTarget, full bool) {
	vctx, cancel := context.WithTimeout(ctx, applyTimeout)
	drifts, err := vt.v.Verify(vctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return // stopping
	case err != nil:
		d.metrics.VerifyFailed()
		if !vt.failing {
			d.log.Error("reading back the installed throttle state failed; trying again every few seconds",
				"of", vt.name, "err", err)
		}
		vt.failing = true
	case vt.failing:
		d.log.Info("reading back the installed throttle state works again", "of", vt.name)
		vt.failing = false
	}
	d.reportDrift(vt, drifts)
	if full {
		vt.v.Resync()
	}
	if vt.reapply && (len(drifts) > 0 || full) {
		d.rep.req.Store(true)
	}
}

// reportDrift counts every drift found and logs it when it differs from
// the last look's: one event is one warning, even when the repair needs
// a few looks (a kernel refusing it, someone undoing it again at once).
func (d *Daemon) reportDrift(vt *verifyTarget, drifts []throttle.Drift) {
	what := make([]string, len(drifts))
	for i, dr := range drifts {
		what[i] = dr.String()
		d.metrics.KernelRepair(dr.Object)
	}
	key := strings.Join(what, "; ")
	switch {
	case key != "" && key != vt.last:
		d.log.Warn("kernel objects sanqos installed were removed or changed by someone else; re-installing them",
			"of", vt.name, "drift", key)
	case key == "" && vt.last != "":
		// The end of the event the warning began: without it a reader of
		// the journal cannot tell a repair that took from one that failed.
		d.log.Info("kernel objects repaired; what sanqos installed is whole again", "of", vt.name, "was", vt.last)
	}
	vt.last = key
}

// takeRepair turns a pending request of the verifier into a resync of the
// tick loop.
func (d *Daemon) takeRepair() {
	if d.rep.req.Swap(false) {
		d.needsResync = true
	}
}
