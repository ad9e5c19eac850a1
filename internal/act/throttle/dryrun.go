package throttle

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/sanqos/sanqos/internal/act/plan"
)

// DryRun changes nothing; it logs each state that differs from the last
// one, so that a controller can be watched before it is trusted.
type DryRun struct {
	log  *slog.Logger
	mu   sync.Mutex
	last State
	seen bool
}

// NewDryRun returns a backend that only logs.
func NewDryRun(log *slog.Logger) *DryRun {
	if log == nil {
		log = slog.Default()
	}
	return &DryRun{log: log.With("backend", "dry-run")}
}

func (b *DryRun) Name() string { return "dry-run" }

func (b *DryRun) Apply(ctx context.Context, s State) error {
	if err := plan.ValidateShape(s); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen && statesEqual(b.last, s) {
		return nil
	}
	b.seen = true
	b.last = State{Groups: slices.Clone(s.Groups)}
	if len(s.Groups) == 0 {
		b.log.Info("would remove all throttles")
	}
	for _, g := range plan.SortedGroups(s) {
		b.log.Info("would throttle", "group", g.Name, "members", g.Members, "ports", g.TargetPorts(),
			"write_delay", g.WriteDelay, "read_delay", g.ReadDelay, "read_rate", g.ReadRate)
	}
	return nil
}

func statesEqual(a, b State) bool {
	return slices.EqualFunc(plan.SortedGroups(a), plan.SortedGroups(b), func(x, y Group) bool {
		return x.Name == y.Name && slices.Equal(x.Members, y.Members) && slices.Equal(x.Ports, y.Ports) &&
			x.WriteDelay == y.WriteDelay && x.ReadDelay == y.ReadDelay && x.ReadRate == y.ReadRate
	})
}

func (b *DryRun) Stats() Stats { return Stats{} }
func (b *DryRun) Close() error { return nil }
