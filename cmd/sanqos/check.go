package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sanqos/sanqos/internal/discover"
	"github.com/sanqos/sanqos/internal/engine"
)

// cmdCheck is 'sanqos check': it validates a configuration as 'sanqos run'
// would start with it, touching nothing. The unit's ExecReload runs it
// before sending SIGHUP, so that 'systemctl reload sanqos' with a bad file
// fails with the reason instead of succeeding while the daemon refuses
// the file in its journal.
func cmdCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, checkUsage)
			return errHelp
		}
	}
	manual, err := manualMode(args)
	if err != nil {
		return err
	}
	// run's own parser and validation: the flags are run's, so that the
	// unit's ExecStart arguments can be checked as given.
	var msgs strings.Builder
	o, err := parseRunOptions(args, manual, &msgs)
	if err != nil {
		if errors.Is(err, errUsage) {
			return errors.New(strings.TrimSpace(msgs.String()))
		}
		return err
	}
	if !manual {
		// What run builds from the options before it touches the kernel
		// (daemonOptions, and the reloader on SIGHUP): the engine and the
		// discovery adapter.
		if _, err := engine.New(o.engine, o.topo); err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		if !o.fixed {
			if _, err := discover.FromConfig(o.config, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
				return fmt.Errorf("discovery: %w", err)
			}
		}
	}
	for _, w := range o.config.Warnings() {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	fmt.Fprintln(stdout, "configuration OK")
	return nil
}

const checkUsage = `Usage: sanqos check --config FILE [run flags]

Validate a configuration exactly as 'sanqos run' would at start (and on
SIGHUP), without starting anything: the file, the flags that override it,
the controller's settings and the discovery adapter. Exits 0 and prints
"configuration OK", or exits 1 with the error. The flags are those of
'sanqos run'. Settings that a reload cannot change (listen, socket,
backend, tick) are not compared with a running daemon: the daemon refuses
those on SIGHUP itself.
`
