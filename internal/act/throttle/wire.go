package throttle

import (
	"context"

	"github.com/sanqos/sanqos/internal/act/wire"
)

// Wire counts each client's bytes on the wire (see package wire).
type Wire = wire.Wire

// WireConfig configures the wire counters (see package wire).
type WireConfig = wire.WireConfig

// The daemon verifies the wire counters with the backends.
var _ Verifier = (*Wire)(nil)

// OpenWire opens the wire counters of a backend instance, the default
// one (DefaultInstance) when cfg names none (see wire.OpenWire).
func OpenWire(ctx context.Context, cfg WireConfig) (*Wire, error) {
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance(Options{})
	}
	return wire.OpenWire(ctx, cfg)
}
