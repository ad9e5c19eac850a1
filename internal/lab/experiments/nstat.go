package experiments

import (
	"context"
	"encoding/json"
	"fmt"
)

// retransCounter is the TCP retransmit counter of the namespaces of a run:
// TcpRetransSegs, which the kernel keeps per network namespace. It is an
// interface so the arithmetic of a run is tested without namespaces.
type retransCounter interface {
	// Retrans returns each namespace's TcpRetransSegs now.
	Retrans(ctx context.Context, namespaces []string) (map[string]int64, error)
}

// nstatCounter asks nstat inside each namespace. Absolute values (-a, no
// history: nstat's history file is per user, not per namespace, so a reset
// in one namespace would corrupt the next) read before and after a run
// give the same difference as a reset before and a read after.
type nstatCounter struct {
	run func(ctx context.Context, ns string, argv ...string) ([]byte, error)
}

func (c nstatCounter) Retrans(ctx context.Context, namespaces []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, ns := range namespaces {
		b, err := c.run(ctx, ns, "nstat", "-asz", "-j", "TcpRetransSegs")
		if err != nil {
			return nil, fmt.Errorf("counting retransmissions in %s: %w", ns, err)
		}
		n, err := parseNstatRetrans(b)
		if err != nil {
			return nil, fmt.Errorf("counting retransmissions in %s: %w", ns, err)
		}
		out[ns] = n
	}
	return out, nil
}

// parseNstatRetrans reads `nstat -j` output: {"kernel":{"TcpRetransSegs":N}}.
func parseNstatRetrans(b []byte) (int64, error) {
	var doc struct {
		Kernel map[string]int64 `json:"kernel"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, fmt.Errorf("parsing nstat output %q: %w", b, err)
	}
	n, ok := doc.Kernel["TcpRetransSegs"]
	if !ok {
		return 0, fmt.Errorf("nstat output has no TcpRetransSegs: %q", b)
	}
	return n, nil
}

// retransDiff is after − before per namespace.
func retransDiff(before, after map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for ns, a := range after {
		d[ns] = a - before[ns]
	}
	return d
}
