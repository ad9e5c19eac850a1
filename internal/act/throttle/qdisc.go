package throttle

import (
	"context"

	"github.com/sanqos/sanqos/internal/act/nfqbackend"
	"github.com/sanqos/sanqos/internal/act/qdisc"
)

// The netem, htb and edt backends, which put qdiscs of their own on the
// device, live in package qdisc; these are the names of it the daemon
// uses.

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

// EDT is the tc/BPF departure-time backend (see qdisc.EDT).
type EDT = qdisc.EDT

// DefaultEDTTTL is how long an edt entry lives unless renewed.
const DefaultEDTTTL = qdisc.DefaultEDTTTL

// openEDT installs the edt path on o.Dev; an entry no longer wanted
// lingers nfqbackend.RiseKeep, as a member leaving the nfqueue backend's set does.
func openEDT(ctx context.Context, o Options) (*EDT, error) {
	return qdisc.OpenEDT(ctx, qdisc.EDTConfig{Instance: o.Instance, Dev: o.Dev, SmallSegment: o.SmallSegment,
		SmallSegments: o.SmallSegments, Logger: o.Logger, Linger: nfqbackend.RiseKeep})
}
