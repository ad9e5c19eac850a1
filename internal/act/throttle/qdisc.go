package throttle

import (
	"context"

	"github.com/sanqos/sanqos/internal/act/qdisc"
)

// The netem and htb backends, which classify packets into qdiscs of
// their own on the device, live in package qdisc; these are the names
// of it the daemon uses.

// TCConfig configures the tc-based backends (netem, htb).
type TCConfig = qdisc.TCConfig

// Netem is the thesis's kernel data path (see qdisc.Netem).
type Netem = qdisc.Netem

// HTB caps the read bandwidth of consumers (see qdisc.HTB).
type HTB = qdisc.HTB

// NewNetem installs the netem backend on cfg.Dev (see qdisc.NewNetem).
func NewNetem(ctx context.Context, cfg TCConfig) (*Netem, error) { return qdisc.NewNetem(ctx, cfg) }

// NewHTB installs the htb backend on cfg.Dev (see qdisc.NewHTB).
func NewHTB(ctx context.Context, cfg TCConfig) (*HTB, error) { return qdisc.NewHTB(ctx, cfg) }
