package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// tcRoot is what the two tc backends (netem, htb) share: an HTB root qdisc
// of our own handle on Dev whose class 1 carries unthrottled traffic, the
// chain and ipsets that classify packets into its other classes, and
// tearing both down exactly once.
type tcRoot struct {
	cfg    TCConfig
	inst   string        // instance name (see owner)
	ilock  *instanceLock // held from build until Close
	handle int           // NetemHandle or HTBHandle
	rec    *reconciler
	leaves [][]string // the backend's tc commands under the root, for rebuild (verify_backends.go)
	log    *slog.Logger
	mu     sync.Mutex // serialises Apply and Close
	done   bool       // Close has run; Apply refuses
}

func newTCRoot(cfg TCConfig, name string, handle int) tcRoot {
	inst := cfg.Instance
	if inst == "" {
		inst = DefaultInstance(Options{Backend: name, Dev: cfg.Dev})
	}
	return tcRoot{cfg: cfg, inst: inst, handle: handle, rec: newOwnedReconciler(cfg.Firewall, cfg.Sets, inst, 0),
		log: cfg.Logger.With("backend", name, "instance", inst)}
}

// build removes what an earlier run left (our chain, sets and root qdisc),
// installs the root with its default class and then the backend's leaves.
// When a tc command fails it removes the root again and returns that
// command and its output too, so the backend can explain the failure.
//
// It first takes the instance's lock: the root qdisc has a fixed handle,
// so the instance (named after the device by default) owns the device's
// root; a second instance on the same device is refused before it
// touches anything.
func (t *tcRoot) build(ctx context.Context, leaves [][]string) (failed []string, out string, err error) {
	if err := CheckInstance(t.inst); err != nil {
		return nil, "", err
	}
	lk, err := lockInstance(0, t.inst)
	if err != nil {
		return nil, "", fmt.Errorf("%w; stop it first", err)
	}
	defer func() {
		if err != nil {
			lk.release()
		} else {
			t.ilock = lk
		}
	}()
	if err := t.rec.reset(ctx); err != nil {
		return nil, "", fmt.Errorf("removing leftovers of an earlier run: %w", err)
	}
	if err := t.rec.sweepDead(ctx); err != nil {
		t.log.Warn("some leftovers of dead sanqos instances stay", "err", err)
	}
	run, dev := t.cfg.Run, t.cfg.Dev
	if err := removeRootQdisc(ctx, run, dev, t.handle); err != nil {
		return nil, "", err
	}
	t.leaves = leaves
	for _, c := range t.tree() {
		if out, err := run.Run(ctx, "", "tc", c...); err != nil {
			if rerr := removeRootQdisc(ctx, run, dev, t.handle); rerr != nil {
				err = errors.Join(err, fmt.Errorf("undoing the partial tree: %w", rerr))
			}
			return c, out, err
		}
	}
	return nil, "", nil
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
	// Close runs at shutdown, often after the daemon's context is
	// cancelled, and must still clean up.
	ctx := context.Background()
	err := t.rec.reset(ctx)
	err = errors.Join(err, removeRootQdisc(ctx, t.cfg.Run, t.cfg.Dev, t.handle))
	t.ilock.release()
	return err
}

// Stats is empty: the kernel holds and releases the packets, and tc's
// own counters are the place to look.
func (t *tcRoot) Stats() Stats { return Stats{} }
