package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Backends lists the backend names Open accepts, the default first.
var Backends = []string{"nfqueue", "netem", "htb", "edt", "dry-run"}

// Options selects and configures a backend for Open.
type Options struct {
	Backend string // one of Backends; "" means nfqueue
	// Instance names the backend's kernel objects and its lock, so that
	// instances never touch each other's (see owned.Owner); "" means
	// DefaultInstance.
	Instance string
	Dev      string // netem, htb: interface towards the initiators
	// RateDev, with a delay backend (nfqueue, netem), adds an htb
	// backend on this interface towards the initiators for read rates
	// (see Composite); "" means delays only.
	RateDev      string
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
// left there. It refuses to start an instance that is running. With
// RateDev it starts an htb backend there too and returns both as one
// Composite.
func Open(ctx context.Context, o Options) (Backend, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.RateDev == "" {
		return open(ctx, o)
	}
	d, err := open(ctx, o)
	if err != nil {
		return nil, err
	}
	r, err := NewHTB(ctx, TCConfig{Dev: o.RateDev, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, Logger: o.Logger})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("starting read rates on %s: %w", o.RateDev, err), d.Close())
	}
	return &Composite{Delay: d, Rate: r}, nil
}

func open(ctx context.Context, o Options) (Backend, error) {
	switch o.Backend {
	case "", "nfqueue":
		return NewNfqueue(ctx, NfqueueConfig{Instance: o.Instance, QueueNum: o.QueueNum, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, AckDelay: o.AckDelay, Logger: o.Logger})
	case "netem":
		return NewNetem(ctx, TCConfig{Instance: o.Instance, Dev: o.Dev, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, Logger: o.Logger})
	case "htb":
		return NewHTB(ctx, TCConfig{Instance: o.Instance, Dev: o.Dev, SmallSegment: o.SmallSegment, SmallSegments: o.SmallSegments, Logger: o.Logger})
	case "edt":
		return openEDT(ctx, o)
	case "dry-run":
		return NewDryRun(o.Logger), nil
	case Auto:
		return nil, errors.New("backend auto: resolve it with ChooseBackend before opening it")
	}
	return nil, fmt.Errorf("unknown backend %q: choose one of nfqueue (default), netem, htb, edt, dry-run, auto", o.Backend)
}
