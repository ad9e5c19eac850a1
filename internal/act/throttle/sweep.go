package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/sanqos/sanqos/internal/act/owned"
	"github.com/sanqos/sanqos/internal/act/qdisc"
)

// sweeper is the owner name of a reconciler that belongs to no instance:
// it matches no instance name (instanceRE), so sweepDead treats every
// instance it finds as another's and removes it when it is dead.
const sweeper = "-"

// SweepDead removes, in the current network namespace, the objects of
// every sanqos instance that is provably dead (its lock is free) and of
// versions before ownership: their iptables and ip6tables chains, their
// ipsets, and the tc backends' root qdiscs (netem, htb) on any
// interface. It is the clean-up that needs no configuration: 'sanqos run
// --cleanup-only' falls back to it when the configuration cannot say
// which instance is meant. A live instance's objects are never touched.
// What it could not remove is returned; it goes on past each failure.
func SweepDead(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	run := owned.ExecRunner{}
	sets := owned.Ipsets{}
	var errs []error
	v4 := owned.NewOwnedReconciler(&owned.Iptables{Run: run}, sets, sweeper, 0)
	if err := v4.SweepDead(ctx); err != nil {
		errs = append(errs, err)
	}
	fw6 := &owned.Iptables{Run: run, V6: true}
	if _, err := fw6.Chains(ctx); err != nil {
		log.Warn("ip6tables does not work here: IPv6 leftovers, if any, stay", "err", err)
	} else {
		v6 := owned.NewV6Reconciler(fw6, sets, sweeper, 0)
		if err := v6.SweepDead(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing interfaces for tc leftovers: %w", err))...)
	}
	for _, ifc := range ifs {
		// The tc instances are named after their device (DefaultInstance);
		// its lock says whether the root qdisc's owner is alive.
		inst := DefaultInstance(Options{Backend: "htb", Dev: ifc.Name})
		lk, dead := owned.TryLockDead(0, inst)
		if !dead {
			continue
		}
		for _, h := range []int{qdisc.NetemHandle, qdisc.HTBHandle} {
			if err := qdisc.RemoveRootQdisc(ctx, run, ifc.Name, h); err != nil {
				errs = append(errs, fmt.Errorf("dead instance %q: %w", inst, err))
			}
		}
		lk.Release()
	}
	return errors.Join(errs...)
}
