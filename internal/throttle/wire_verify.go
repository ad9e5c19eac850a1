package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

var _ Verifier = (*Wire)(nil)

// Verify checks each half's chain, its jumps and rules, its two sets
// and their clients, and re-installs a half that drifted, at once: the
// counters have no Apply to do it later. A client's counters restart
// from zero when its entries had to be added again, which the meter
// reads as a counter reset, not as traffic.
func (w *Wire) Verify(ctx context.Context) ([]Drift, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lock == nil {
		return nil, nil
	}
	var out []Drift
	var errs []error
	for _, hf := range w.halves {
		d, err := w.verifyHalf(ctx, hf)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(d) == 0 {
			continue
		}
		out = append(out, d...)
		if err := w.reinstall(ctx, hf); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// Resync does nothing: every Verify looks at all of the counters' objects.
func (w *Wire) Resync() {}

// verifyHalf compares one half with what install (or SetPorts) and
// SetClients put there.
func (w *Wire) verifyHalf(ctx context.Context, hf wireHalf) ([]Drift, error) {
	var out []Drift
	chain := hf.own.chain()
	if cr, ok := hf.fw.(ChainReader); ok {
		in, err := cr.Installed(ctx, chain)
		if err != nil {
			return nil, fmt.Errorf("wire counters: %w", err)
		}
		out = append(out, chainDrift(chain, w.rules(hf), in)...)
	}
	for _, n := range []string{wireSent, wireRecv} {
		name := hf.own.set(n)
		r, err := w.h.IpsetList(name)
		if err != nil {
			out = append(out, Drift{Object: "set", Name: name, Want: "present", Found: err.Error()})
			continue
		}
		var missing int
		for a := range w.clients {
			if a.Is6() != hf.own.v6 {
				continue
			}
			if !slices.ContainsFunc(r.Entries, func(e netlink.IPSetEntry) bool {
				ea, ok := netip.AddrFromSlice(e.IP)
				return ok && ea.Unmap() == a
			}) {
				missing++
			}
		}
		if missing > 0 {
			out = append(out, Drift{Object: "member", Name: name, Want: fmt.Sprintf("%d more clients", missing), Found: "absent"})
		}
	}
	return out, nil
}

// reinstall puts one half back: sets, chain and jumps, then its clients.
func (w *Wire) reinstall(ctx context.Context, hf wireHalf) error {
	if err := w.install(ctx, hf); err != nil {
		return err
	}
	var errs []error
	for a := range w.clients {
		if a.Is6() == hf.own.v6 {
			errs = append(errs, w.member(a, true))
		}
	}
	return errors.Join(errs...)
}
