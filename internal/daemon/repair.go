package daemon

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sanqos/sanqos/internal/throttle"
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

// repairState is the verifier goroutine's, but for req.
type repairState struct {
	// req asks the tick loop to re-apply the state even though it has
	// not changed; the loop takes it at its next tick.
	req     atomic.Bool
	last    string // drift of the last look, reported already
	failing bool   // the last read-back failed
}

// verifyLoop runs until ctx ends; a backend that is no Verifier (edt,
// dry-run) has nothing to read back.
func (d *Daemon) verifyLoop(ctx context.Context) {
	v, ok := d.o.Backend.(throttle.Verifier)
	if !ok {
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
			d.verifyOnce(ctx, v, full)
		}
	}
}

// verifyOnce reads back once; with full it has everything re-installed
// whatever it finds.
func (d *Daemon) verifyOnce(ctx context.Context, v throttle.Verifier, full bool) {
	vctx, cancel := context.WithTimeout(ctx, applyTimeout)
	drifts, err := v.Verify(vctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return // stopping
	case err != nil:
		d.metrics.VerifyFailed()
		if !d.rep.failing {
			d.log.Error("reading back the installed throttle state failed; trying again every few seconds",
				"backend", d.o.Backend.Name(), "err", err)
		}
		d.rep.failing = true
	case d.rep.failing:
		d.log.Info("reading back the installed throttle state works again", "backend", d.o.Backend.Name())
		d.rep.failing = false
	}
	d.reportDrift(drifts)
	if full {
		v.Resync()
	}
	if len(drifts) > 0 || full {
		d.rep.req.Store(true)
	}
}

// reportDrift counts every drift found and logs it when it differs from
// the last look's: one event is one warning, even when the repair needs
// a few looks (a kernel refusing it, someone undoing it again at once).
func (d *Daemon) reportDrift(drifts []throttle.Drift) {
	what := make([]string, len(drifts))
	for i, dr := range drifts {
		what[i] = dr.String()
		d.metrics.KernelRepair(dr.Object)
	}
	key := strings.Join(what, "; ")
	if key != "" && key != d.rep.last {
		d.log.Warn("kernel objects sanqos installed were removed or changed by someone else; re-installing them",
			"backend", d.o.Backend.Name(), "drift", key)
	}
	d.rep.last = key
}

// takeRepair turns a pending request of the verifier into a resync of the
// tick loop.
func (d *Daemon) takeRepair() {
	if d.rep.req.Swap(false) {
		d.needsResync = true
	}
}
