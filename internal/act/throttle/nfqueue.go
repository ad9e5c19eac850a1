package throttle

import (
	"context"

	"github.com/sanqos/sanqos/internal/act/nfqbackend"
)

// The nfqueue backend lives in package nfqbackend; these are the names
// of it the daemon, the CLI and the guest tests use.

// Nfqueue is the default backend: a real-time packet thread holds the
// queued packets (see nfqbackend.Nfqueue).
type Nfqueue = nfqbackend.Nfqueue

// NfqueueConfig configures the nfqueue backend.
type NfqueueConfig = nfqbackend.NfqueueConfig

// Defaults of the nfqueue backend (see package nfqbackend).
const (
	DefaultQueueNum     = nfqbackend.DefaultQueueNum
	DefaultSmallSegment = nfqbackend.DefaultSmallSegment
	DefaultMaxBacklog   = nfqbackend.DefaultMaxBacklog
)

// NewNfqueue starts the nfqueue backend (see nfqbackend.NewNfqueue).
func NewNfqueue(ctx context.Context, cfg NfqueueConfig) (*Nfqueue, error) {
	return nfqbackend.NewNfqueue(ctx, cfg)
}

// NfqueueRules are the iptables rules of the nfqueue backend for s on
// queue (see nfqbackend.NfqueueRules).
func NfqueueRules(s State, queue uint16) []string { return nfqbackend.NfqueueRules(s, queue) }
