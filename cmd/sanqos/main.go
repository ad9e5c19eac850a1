// Command sanqos keeps the read response time of shared storage below a
// threshold by delaying the TCP packets of the consumers that write to it.
//
// Each subcommand lives in its own file of this package; main.go only
// dispatches, so that commands can be developed without touching each other.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// command is one sanqos subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"run", "run the QoS daemon (autonomic control, or --manual throttling only)", cmdRun},
		{"throttle", "set, free or list a manual packet delay for one initiator", cmdThrottle},
		{"check", "validate a configuration file as 'run' would, starting nothing", cmdCheck},
		{"status", "print the running daemon's resources, signals and throttles", cmdStatus},
		{"top", "live terminal view of the running daemon", cmdTop},
		{"sim", "run the deterministic simulation of the thesis experiment (sanqos-lab)", cmdSim},
		{"lab", "bring up the iSCSI lab on this machine and run experiments (sanqos-lab)", cmdLab},
		{"probe", "print per-device block I/O latency percentiles from the eBPF probe", cmdProbe},
		{"version", "print the version", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `sanqos keeps the read response time of shared storage below a threshold.

When many consumers share one storage pool, a few writers can make every
reader wait. sanqos runs on the storage target, measures each shared
resource's read response time from /proc/diskstats and, only while it is over
the threshold, slows the writers down by delaying the TCP packets the target
sends them. No packet is dropped and no client software is needed.

Usage:
  sanqos <command> [flags]

Commands:
`)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'sanqos <command> --help' for the flags of a command.\n")
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the command named by args[0] and returns the exit code.
func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version", "-version":
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		ctx, stop := signalContext(c.name) // signals.go
		defer stop()
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil, errors.Is(err, errHelp):
			return 0
		case errors.Is(err, errUsage):
			return 2
		default:
			fmt.Fprintf(stderr, "sanqos %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "sanqos: unknown command %q\n", args[0])
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	fmt.Fprintf(stderr, "Commands are: %s. Run 'sanqos --help' for more.\n", strings.Join(names, ", "))
	return 2
}

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "sanqos version", "Print the version of sanqos.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "sanqos %s\n", version)
	return nil
}
