package ctl

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// ManualHandler serves 'sanqos run --manual': the manual throttles are
// the whole state of the backend.
type ManualHandler struct {
	Backend   throttle.Backend
	Overrides *Overrides
	// Sys is where sysfs is, for the link speed a rate is checked
	// against; "" means /sys.
	Sys string
	mu  sync.Mutex // one Apply at a time, in request order
}

// NewManualHandler returns a handler applying manual throttles to b.
func NewManualHandler(b throttle.Backend) *ManualHandler {
	return &ManualHandler{Backend: b, Overrides: &Overrides{}}
}

// Apply applies the overrides as they are (the configuration's read
// rates at start).
func (h *ManualHandler) Apply(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.apply(ctx)
}

// Renew keeps a Renewer backend's delays (edt) alive for one more TTL.
// The manual daemon has no control loop, so RenewEvery calls it.
func (h *ManualHandler) Renew(ctx context.Context) error {
	r, ok := h.Backend.(throttle.Renewer)
	if !ok {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return r.Renew(ctx)
}

// RenewEvery renews the backend's delays every interval until ctx ends
// (at once when the backend needs no renewal), logging when renewals
// start failing and when they work again.
func (h *ManualHandler) RenewEvery(ctx context.Context, interval time.Duration, log *slog.Logger) {
	if _, ok := h.Backend.(throttle.Renewer); !ok {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			err := h.Renew(ctx)
			switch {
			case err != nil && !failing:
				log.Error("renewing the throttles failed; they lapse unless a renewal works", "err", err)
			case err == nil && failing:
				log.Info("renewing the throttles works again")
			}
			failing = err != nil
		}
	}
}

func (h *ManualHandler) apply(ctx context.Context) error {
	return h.Backend.Apply(ctx, throttle.State{Groups: h.Overrides.Groups()})
}

// Handle answers one request. A request that fails leaves the throttles
// as they were.
func (h *ManualHandler) Handle(ctx context.Context, r Request) Response {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Op {
	case OpThrottle:
		m, err := ParseManual(r)
		if err != nil {
			return Response{Error: err.Error()}
		}
		prev, had := h.Overrides.Get(m.IP)
		if err := Check(m, prev, had, h.Backend, h.Sys); err != nil {
			return Response{Error: err.Error()}
		}
		h.Overrides.Set(m)
		if err := h.apply(ctx); err != nil {
			h.Overrides.Restore(m.IP, prev, had)
			return Response{Error: rollbackMessage("applying the throttle", err, h.apply(ctx))}
		}
	case OpFree:
		a, err := netip.ParseAddr(r.IP)
		if err != nil {
			return Response{Error: fmt.Sprintf("--ip %q is not an IP address", r.IP)}
		}
		prev, had := h.Overrides.Get(a.Unmap())
		if !had {
			return Response{Error: fmt.Sprintf("%s has no manual throttle (see 'sanqos throttle --list')", a)}
		}
		h.Overrides.Free(a.Unmap())
		if err := h.apply(ctx); err != nil {
			h.Overrides.Set(prev)
			return Response{Error: rollbackMessage("removing the throttle", err, h.apply(ctx))}
		}
	case OpList, OpStatus:
	case OpTerms, OpClearTerms:
		return Response{Error: "manual mode has no controller to give shares, reservations, caps or thresholds to: run the autonomic daemon (sanqos run without --manual)"}
	default:
		return Response{Error: fmt.Sprintf("unknown operation %q: want throttle, free, list or status", r.Op)}
	}
	resp := Response{OK: true, Mode: "manual", Backend: h.Backend.Name(), Throttles: h.Overrides.List()}
	if r.Op == OpStatus {
		st := h.Backend.Stats()
		resp.Stats = &st
	}
	return resp
}

// rollbackMessage says what failed and, if putting the previous throttles
// back failed as well, that the data path may now differ from the list, so
// the administrator knows to look (and that stopping sanqos clears it).
func rollbackMessage(doing string, err, rollbackErr error) string {
	if rollbackErr == nil {
		return fmt.Sprintf("%s: %v", doing, err)
	}
	return fmt.Sprintf("%s: %v; restoring the previous throttles failed too (%v), so the data path may not match 'sanqos throttle --list': stop sanqos to remove every throttle", doing, err, rollbackErr)
}
