package throttle

import (
	"context"
	"errors"
)

var (
	_ Verifier = (*Nfqueue)(nil)
	_ Verifier = (*Netem)(nil)
	_ Verifier = (*HTB)(nil)
	_ Verifier = (*EDT)(nil)
)

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
