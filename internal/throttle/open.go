package throttle

import (
	"context"
	"fmt"
	"log/slog"
)

// Backends lists the backend names Open accepts, the default first.
var Backends = []string{"nfqueue", "netem", "htb", "dry-run"}

// Options selects and configures a backend for Open.
type Options struct {
	Backend string // one of Backends; "" means nfqueue
	// Instance names the backend's kernel objects and its lock, so that
	// instances never touch each other's (see owner); "" means
	// DefaultInstance.
	Instance     string
	Dev          string // netem, htb: interface towards the initiators
	QueueNum     uint16 // nfqueue
	SmallSegment int    // payload bytes still counted as write direction
	// SmallSegments overrides SmallSegment per target port.
	SmallSegments map[uint16]int
	// AckDelay (nfqueue) holds pure ACKs in the write direction too; see
	// NfqueueConfig.AckDelay.
	AckDelay bool
	Logger   *slog.Logger
}

// Open starts the named backend in the current network namespace, after
// removing whatever a dead earlier run of it (or of any dead instance)
// left there. It refuses to start an instance that is running.
func Open(ctx context.Context, o Options) (Backend, error) {
	switch o.Backend {
	case "", "nfqueue":
		return NewNfqueue(ctx, NfqueueConfig{Instance: o.Instance, QueueNum: o.QueueNum, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, AckDelay: o.AckDelay, Logger: o.Logger})
	case "netem":
		return NewNetem(ctx, TCConfig{Instance: o.Instance, Dev: o.Dev, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, Logger: o.Logger})
	case "htb":
		return NewHTB(ctx, TCConfig{Instance: o.Instance, Dev: o.Dev, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, Logger: o.Logger})
	case "dry-run":
		return NewDryRun(o.Logger), nil
	}
	return nil, fmt.Errorf("unknown backend %q: choose one of nfqueue (default), netem, htb, dry-run", o.Backend)
}
