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
	"runtime"
	"runtime/debug"
	"strings"
)

// version, commit and date are set at build time by make build
// (-ldflags "-X main.version=… -X main.commit=… -X main.date=…"). Where
// they are empty, sanqos version falls back on what the go command
// stamped into the binary (see versionInfo).
var version, commit, date string

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
		{"check", "say whether 'run' would start here and why not: config, kernel, backend, capabilities, discovery", cmdCheck},
		{"status", "print the running daemon's resources, signals and throttles", cmdStatus},
		{"top", "live terminal view of the running daemon", cmdTop},
		{"sim", "run the deterministic simulation of the thesis experiment (sanqos-lab)", cmdSim},
		{"lab", "bring up the iSCSI lab on this machine and run experiments (sanqos-lab)", cmdLab},
		{"probe", "print per-device block I/O latency percentiles from the eBPF probe", cmdProbe},
		{"version", "print the version, commit and build date (also -v, --version)", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `sanqos keeps the read response time of shared storage below a threshold.

When many consumers share one storage pool, a few writers can make every
reader wait. sanqos runs on the storage target, measures each shared
resource's read response time (every read, timed in the kernel by an eBPF
probe on the block layer where the kernel allows it, else /proc/diskstats)
and, only while it is over the threshold, slows the writers down by delaying
the TCP packets the target sends them. No packet is dropped and no client
software is needed.

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
	case "--version", "-version", "-v":
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

func init() {
	// The daemon reports version in /status and its log: resolved here,
	// so that a plain go build reports what the go command stamped.
	bi, _ := debug.ReadBuildInfo()
	version = versionInfo(version, commit, date, bi).version
}

func cmdVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "sanqos version", "Print the version of sanqos, the commit it was built from and when.", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionInfo(version, commit, date, bi))
	return nil
}

// buildVersion is what sanqos version prints.
type buildVersion struct{ version, commit, date, goVersion string }

func (v buildVersion) String() string {
	return fmt.Sprintf("sanqos %s\ncommit: %s\nbuilt:  %s\ngo:     %s\n", v.version, v.commit, v.date, v.goVersion)
}

// versionInfo resolves sanqos version: what the linker set, else what the
// go command stamped (the module's version for go install mod@vX, the
// commit and its time for a build in a git checkout), else "dev" and
// "unknown". Only the linker knows the build's own date; vcs.time is the
// commit's, and is labelled so.
func versionInfo(ldVersion, ldCommit, ldDate string, bi *debug.BuildInfo) buildVersion {
	v := buildVersion{version: ldVersion, commit: ldCommit, date: ldDate, goVersion: runtime.Version()}
	var vcsRev, vcsTime string
	modified := false
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if bi.GoVersion != "" {
			v.goVersion = bi.GoVersion
		}
		if v.version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.version = bi.Main.Version
		}
	}
	if v.commit == "" && vcsRev != "" {
		v.commit = vcsRev
		if modified {
			v.commit += " (modified)"
		}
	}
	if v.date == "" && vcsTime != "" {
		v.date = vcsTime + " (the commit's time)"
	}
	for _, f := range []*string{&v.version, &v.commit, &v.date} {
		if *f == "" {
			*f = "unknown"
		}
	}
	if v.version == "unknown" {
		v.version = "dev"
	}
	return v
}
