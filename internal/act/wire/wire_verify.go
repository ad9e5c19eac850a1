package wire

import (
	"context"

	"github.com/sanqos/sanqos/internal/act/owned"
)

// Verify finds nothing to repair: the counters install nothing in the
// kernel (they read its sockets' own counters), so no other tool can
// remove them.
func (w *Wire) Verify(context.Context) ([]owned.Drift, error) { return nil, nil }

// Resync does nothing (see Verify).
func (w *Wire) Resync() {}
