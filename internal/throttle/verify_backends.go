package throttle

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

var (
	_ Verifier = (*Nfqueue)(nil)
	_ Verifier = (*Netem)(nil)
	_ Verifier = (*HTB)(nil)
)

// Verify checks the chains, jumps, sets and members of both families
// (see Verifier).
func (b *Nfqueue) Verify(ctx context.Context) ([]Drift, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, nil
	}
	sets, err := b.cfg.Sets.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("verifying the nfqueue data path: %w", err)
	}
	out, err := b.rec.verify(ctx, sets)
	if b.rec6 != nil {
		d6, err6 := b.rec6.verify(ctx, sets)
		out, err = append(out, d6...), errors.Join(err, err6)
	}
	if err != nil {
		return out, fmt.Errorf("verifying the nfqueue data path: %w", err)
	}
	return out, nil
}

// Resync makes the next Apply re-install everything (see Verifier).
func (b *Nfqueue) Resync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rec.invalidate()
	if b.rec6 != nil {
		b.rec6.invalidate()
	}
}

// Verify checks the chain, its jump, the sets and their members, and that
// our root qdisc is still the device's. A root qdisc someone deleted is
// reported but not rebuilt: the tree is built once at start, and the
// classes the rules point to went with it (restart the daemon).
func (t *tcRoot) Verify(ctx context.Context) ([]Drift, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return nil, nil
	}
	sets, err := t.cfg.Sets.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("verifying the tc data path: %w", err)
	}
	out, err := t.rec.verify(ctx, sets)
	if err != nil {
		return out, fmt.Errorf("verifying the tc data path: %w", err)
	}
	qd, err := t.cfg.Run.Run(ctx, "", "tc", "qdisc", "show", "dev", t.cfg.Dev, "root")
	if err != nil {
		return out, fmt.Errorf("verifying the root qdisc of %s: %w", t.cfg.Dev, err)
	}
	if want := fmt.Sprintf(" %x: root", t.handle); !strings.Contains(qd, want) {
		found, _, _ := strings.Cut(strings.TrimSpace(qd), "\n")
		out = append(out, Drift{Object: "qdisc", Name: t.cfg.Dev, Want: fmt.Sprintf("htb %x: root", t.handle), Found: found})
	}
	return out, nil
}

// Resync makes the next Apply re-install the chain and sets (see
// Verifier).
func (t *tcRoot) Resync() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rec.invalidate()
}
