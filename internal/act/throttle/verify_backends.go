package throttle

import (
	"context"
	"errors"
	"fmt"
)

var (
	_ Verifier = (*Nfqueue)(nil)
	_ Verifier = (*Netem)(nil)
	_ Verifier = (*HTB)(nil)
	_ Verifier = (*EDT)(nil)
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
	out, err := b.rec.Verify(ctx, sets)
	if b.rec6 != nil {
		d6, err6 := b.rec6.Verify(ctx, sets)
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
	b.rec.Invalidate()
	if b.rec6 != nil {
		b.rec6.Invalidate()
	}
}

var _ Verifier = (*Composite)(nil)

// Verify reads back both halves: the delay backend where it can, and the
// htb beside it.
func (c *Composite) Verify(ctx context.Context) ([]Drift, error) {
	var out []Drift
	var errs []error
	if v, ok := c.Delay.(Verifier); ok {
		d, err := v.Verify(ctx)
		out, errs = append(out, d...), append(errs, err)
	}
	d, err := c.Rate.Verify(ctx)
	return append(out, d...), errors.Join(append(errs, err)...)
}

// Resync passes on to both halves (see Verifier).
func (c *Composite) Resync() {
	if v, ok := c.Delay.(Verifier); ok {
		v.Resync()
	}
	c.Rate.Resync()
}
