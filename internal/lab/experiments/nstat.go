package experiments

import (
	"context"
	"encoding/json"
	"fmt"
)

// retransCounter reads the TCP counters of the namespaces of a run
// (TcpRetransSegs and the rest of nstat's, which the kernel keeps per
// network namespace). It is an interface so the arithmetic of a run is
// tested without namespaces.
type retransCounter interface {
	// Counters returns each namespace's counters now.
	Counters(ctx context.Context, namespaces []string) (map[string]map[string]int64, error)
}

// nstatCounter asks nstat inside each namespace. Absolute values (-a, no
// history: nstat's history file is per user, not per namespace, so a reset
// in one namespace would corrupt the next) read before and after a run
// give the same difference as a reset before and a read after.
type nstatCounter struct {
	run func(ctx context.Context, ns string, argv ...string) ([]byte, error)
}

func (c nstatCounter) Counters(ctx context.Context, namespaces []string) (map[string]map[string]int64, error) {
	out := map[string]map[string]int64{}
	for _, ns := range namespaces {
		b, err := c.run(ctx, ns, "nstat", "-asz", "-j")
		if err != nil {
			return nil, fmt.Errorf("reading TCP counters in %s: %w", ns, err)
		}
		m, err := parseNstat(b)
		if err != nil {
			return nil, fmt.Errorf("reading TCP counters in %s: %w", ns, err)
		}
		out[ns] = m
	}
	return out, nil
}

// parseNstat reads `nstat -j` output: {"kernel":{"TcpRetransSegs":N,…}}.
func parseNstat(b []byte) (map[string]int64, error) {
	var doc struct {
		Kernel map[string]int64 `json:"kernel"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("parsing nstat output %q: %w", b, err)
	}
	if _, ok := doc.Kernel["TcpRetransSegs"]; !ok {
		return nil, fmt.Errorf("nstat output has no TcpRetransSegs: %q", b)
	}
	return doc.Kernel, nil
}

// counterDiff is after − before per namespace, of the counters that moved.
func counterDiff(before, after map[string]map[string]int64) map[string]map[string]int64 {
	d := map[string]map[string]int64{}
	for ns, a := range after {
		m := map[string]int64{}
		for k, v := range a {
			if v != before[ns][k] {
				m[k] = v - before[ns][k]
			}
		}
		d[ns] = m
	}
	return d
}

// counter picks one counter of every namespace.
func counter(d map[string]map[string]int64, name string) map[string]int64 {
	out := map[string]int64{}
	for ns, m := range d {
		out[ns] = m[name]
	}
	return out
}
