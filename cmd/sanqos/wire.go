package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// flagSet reports whether the command line set flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// openWire starts the per-client wire counters when the configuration
// asks for them (config.WireOn) and the backend touches the kernel. They
// are an aid, not a must: when they cannot start, the daemon says so and
// runs on device rates.
func openWire(ctx context.Context, o runOptions, log *slog.Logger) *throttle.Wire {
	if !o.config.WireOn() || o.backend.Backend == "dry-run" {
		return nil
	}
	inst := o.backend.Instance
	if inst == "" {
		inst = throttle.DefaultInstance(o.backend)
	}
	w, err := throttle.OpenWire(ctx, throttle.WireConfig{Instance: inst, Ports: o.ports, SmallSegment: o.backend.SmallSegment, SmallSegments: o.backend.SmallSegments, Logger: log})
	if err != nil {
		log.Warn("no wire counters: every consumer's write rate comes from its device", "err", err)
		return nil
	}
	log.Info("counting each client's bytes on the wire", "ports", o.ports, "attribution", o.config.Attribution)
	return w
}
