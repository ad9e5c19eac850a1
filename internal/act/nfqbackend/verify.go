package nfqbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// Verify checks the chains, jumps, sets and members of both families
// (see throttle.Verifier).
func (b *Nfqueue) Verify(ctx context.Context) ([]owned.Drift, error) {
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

// Resync makes the next Apply re-install everything (see
// throttle.Verifier).
func (b *Nfqueue) Resync() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rec.Invalidate()
	if b.rec6 != nil {
		b.rec6.Invalidate()
	}
}
