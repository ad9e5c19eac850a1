package qdisc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/plan"
)

// tcRoot is what the two tc backends (netem, htb) share: an HTB root qdisc
// of our own handle on Dev whose class 1 carries unthrottled traffic, the
// chain and ipsets that classify packets into its other classes, and
// tearing both down exactly once.
type tcRoot struct {
	cfg    TCConfig
	inst   string      // instance name (see owned.Owner)
	ilock  *owned.Lock // held from build until Close
	handle int         // NetemHandle or HTBHandle
	rec    *owned.Reconciler
	leaves [][]string // the backend's tc commands under the root, for rebuild (verify.go)
	log    *slog.Logger
	mu     sync.Mutex // serialises Apply and Close
	done   bool       // Close has run; Apply refuses

	// The tree is on the device only while someone is throttled (issue
	// 35: nothing of ours on the path while idle). installed says it is;
	// teardown removes it idleGrace after the last throttle ended.
	installed bool
	teardown  *time.Timer
	idleGrace time.Duration
}

// DefaultIdleGrace is how long a data path of ours stays on the device
// after the last throttle ended: deleting a qdisc drops the packets it
// holds, so the tree goes only once the packets classified into it have
// left (netem holds them at most its largest step; an htb class at its
// rate drains a full queue of 1000 segments at 1 MB/s in 1.5 s).
const DefaultIdleGrace = 2 * time.Second

func newTCRoot(cfg TCConfig, name string, handle int) tcRoot {
	inst := cfg.Instance
	if inst == "" {
		inst = owned.DevInstance(cfg.Dev)
	}
	grace := cfg.IdleGrace
	if grace <= 0 {
		grace = DefaultIdleGrace
	}
	return tcRoot{cfg: cfg, inst: inst, handle: handle, rec: owned.NewOwnedReconciler(cfg.Firewall, cfg.Sets, inst, 0),
		log: cfg.Logger.With("backend", name, "instance", inst), idleGrace: grace}
}

// build removes what an earlier run left (our chain, sets and root qdisc)
// and checks that the kernel takes the backend's tree: it installs the
// root with its default class and the leaves, and removes them again
// (the first throttle puts them back, see ensure). When tc fails it
// removes the root again and returns the failed commands and the output
// too, so the backend can explain the failure.
//
// It first takes the instance's lock: the root qdisc has a fixed handle,
// so the instance (named after the device by default) owns the device's
// root; a second instance on the same device is refused before it
// touches anything.
func (t *tcRoot) build(ctx context.Context, leaves [][]string) (failed []string, out string, err error) {
	if err := owned.CheckInstance(t.inst); err != nil {
		return nil, "", err
	}
	lk, err := owned.LockInstance(0, t.inst)
	if err != nil {
		return nil, "", fmt.Errorf("%w; stop it first", err)
	}
	defer func() {
		if err != nil {
			lk.Release()
		} else {
			t.ilock = lk
		}
	}()
	if err := t.rec.Reset(ctx); err != nil {
		return nil, "", fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	if err := t.rec.SweepDead(ctx); err != nil {
		t.log.Warn("some leftovers of dead sanqos instances stay", "err", err)
	}
	run, dev := t.cfg.Run, t.cfg.Dev
	if err := RemoveRootQdisc(ctx, run, dev, t.handle); err != nil {
		return nil, "", err
	}
	t.leaves = leaves
	if failed, out, err := t.install(ctx); err != nil {
		return failed, out, err
	}
	if err := RemoveRootQdisc(ctx, run, dev, t.handle); err != nil {
		return nil, "", err
	}
	t.installed = false
	return nil, "", nil
}

// install puts the tree on the device in one tc batch (one fork: the
// netem tree is some 80 commands, and the first throttle must find it
// within a tick). On failure it removes what the batch left.
func (t *tcRoot) install(ctx context.Context) (failed []string, out string, err error) {
	var batch strings.Builder
	for _, c := range t.tree() {
		batch.WriteString(strings.Join(c, " ") + "\n")
	}
	if out, err := t.cfg.Run.Run(ctx, batch.String(), "tc", "-batch", "-"); err != nil {
		if rerr := RemoveRootQdisc(ctx, t.cfg.Run, t.cfg.Dev, t.handle); rerr != nil {
			err = errors.Join(err, fmt.Errorf("undoing the partial tree: %w", rerr))
		}
		return strings.Fields(batch.String()), out, err
	}
	t.installed = true
	return nil, "", nil
}

// ensure puts the tree on the device for a throttle, and cancels a
// teardown due. t.mu held.
func (t *tcRoot) ensure(ctx context.Context) error {
	if t.teardown != nil {
		t.teardown.Stop()
		t.teardown = nil
	}
	if t.installed {
		return nil
	}
	if _, out, err := t.install(ctx); err != nil {
		return fmt.Errorf("installing the sanqos qdiscs on %s: %w: %s", t.cfg.Dev, err, strings.TrimSpace(out))
	}
	return nil
}

// idle schedules the tree's removal idleGrace from now, when nobody is
// throttled then; removed is called (t.mu held) once it went. t.mu held.
func (t *tcRoot) idle(removed func()) {
	if !t.installed || t.teardown != nil {
		return
	}
	var tm *time.Timer
	tm = time.AfterFunc(t.idleGrace, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		// Not when a throttle came meanwhile (ensure stopped or replaced
		// this timer) or Close ran.
		if t.done || t.teardown != tm || t.rec.HasRules() {
			return
		}
		t.teardown = nil
		if err := RemoveRootQdisc(context.Background(), t.cfg.Run, t.cfg.Dev, t.handle); err != nil {
			t.log.Error("removing the idle sanqos qdiscs; the next look tries again", "err", err)
			return
		}
		t.installed = false
		if removed != nil {
			removed()
		}
	})
	t.teardown = tm
}

// lock takes the mutex for an Apply; it fails, unlocked, once Close ran.
func (t *tcRoot) lock() error {
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return errors.New("backend is closed")
	}
	return nil
}

// Close removes our chain, sets and root qdisc; later calls do nothing.
func (t *tcRoot) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil
	}
	t.done = true
	if t.teardown != nil {
		t.teardown.Stop()
		t.teardown = nil
	}
	t.installed = false
	// Close runs at shutdown, often after the daemon's context is
	// cancelled, and must still clean up.
	ctx := context.Background()
	err := t.rec.Reset(ctx)
	err = errors.Join(err, RemoveRootQdisc(ctx, t.cfg.Run, t.cfg.Dev, t.handle))
	t.ilock.Release()
	return err
}

// Stats is empty: the kernel holds and releases the packets, and tc's
// own counters are the place to look.
func (t *tcRoot) Stats() plan.Stats { return plan.Stats{} }
