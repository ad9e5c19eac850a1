package qdisc

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// Verify checks the chain, its jump, the sets and their members, and,
// while someone is throttled, that our root qdisc is still the device's
// (while nobody is, there is none: see tcRoot.idle). A root qdisc
// someone deleted (`tc qdisc del dev D root`) is rebuilt here, with the
// classes the rules point to; one that someone replaced with their own
// is reported and left to them.
func (t *tcRoot) Verify(ctx context.Context) ([]owned.Drift, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, nil
	}
	sets, err := t.cfg.Sets.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("verifying the tc data path: %w", err)
	}
	out, err := t.rec.Verify(ctx, sets)
	if err != nil {
		return out, fmt.Errorf("verifying the tc data path: %w", err)
	}
	if !t.installed {
		return out, nil
	}
	qd, err := t.cfg.Run.Run(ctx, "", "tc", "qdisc", "show", "dev", t.cfg.Dev, "root")
	if err != nil {
		return out, fmt.Errorf("verifying the root qdisc of %s: %w", t.cfg.Dev, err)
	}
	if want := fmt.Sprintf(" %x: root", t.handle); !strings.Contains(qd, want) {
		found, _, _ := strings.Cut(strings.TrimSpace(qd), "\n")
		out = append(out, owned.Drift{Object: "qdisc", Name: t.cfg.Dev, Want: fmt.Sprintf("htb %x: root", t.handle), Found: found})
		t.rec.Invalidate()
		if err := t.rebuild(ctx); err != nil {
			return out, err
		}
	}
	return out, nil
}

// tree is the tc commands that build our root on the device: the HTB
// root whose default class 1 carries unthrottled traffic, then the
// backend's leaves.
func (t *tcRoot) tree() [][]string {
	dev, h := t.cfg.Dev, fmt.Sprintf("%x:", t.handle)
	return append([][]string{
		{"qdisc", "add", "dev", dev, "root", "handle", h, "htb", "default", "1"},
		{"class", "add", "dev", dev, "parent", h, "classid", fmt.Sprintf("%x:1", t.handle), "htb", "rate", lineRate},
	}, t.leaves...)
}

// rebuild puts our root back after someone deleted it. The kernel
// refuses to add it over a root qdisc of someone else's, which is theirs
// to remove.
func (t *tcRoot) rebuild(ctx context.Context) error {
	if _, out, err := t.install(ctx); err != nil {
		return fmt.Errorf("rebuilding the sanqos qdiscs of %s: %w: %s", t.cfg.Dev, err, strings.TrimSpace(out))
	}
	return nil
}

// Verify is tcRoot's; after a rebuild the read-rate classes are gone
// with the root, and the next Apply adds them again.
func (b *HTB) Verify(ctx context.Context) ([]owned.Drift, error) {
	out, err := b.tcRoot.Verify(ctx)
	if slices.ContainsFunc(out, func(d owned.Drift) bool { return d.Object == "qdisc" }) {
		b.mu.Lock()
		b.classes = map[int]uint64{}
		b.mu.Unlock()
	}
	return out, err
}

// Resync makes the next Apply re-install the chain and sets (see
// Verifier).
func (t *tcRoot) Resync() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rec.Invalidate()
}
