package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
	"github.com/sanqos/sanqos/internal/config"
	"github.com/sanqos/sanqos/internal/serve/ctl"
	"github.com/sanqos/sanqos/internal/serve/journal"
)

// cmdRun is 'sanqos run': the autonomic daemon (daemon.go) or, with
// --manual, a daemon that only serves manual throttles on the control
// socket. Both take the same flags (parseRunOptions); the mode decides
// which of them are used and which --help text explains them.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	manual, err := manualMode(args)
	if err != nil {
		fmt.Fprintf(stderr, "sanqos run: %v\nRun 'sanqos run --help' for usage.\n", err)
		return errUsage
	}
	// Under systemd each line carries its journald priority (internal/serve/journal).
	log := slog.New(journal.NewHandler(stderr, nil))
	o, err := parseRunOptions(args, manual, stderr)
	if err != nil {
		if !errors.Is(err, errHelp) && cleanupRequested(args) {
			return cleanupWithoutConfig(ctx, err, log)
		}
		return err
	}
	o.backend.Logger = log
	if manual {
		return runManual(ctx, o, log)
	}
	return runAutonomic(ctx, o, log, args)
}

// manualMode reports whether args ask for manual mode, before the flag
// sets of the two modes (which differ) parse them. The value is parsed
// as both flag sets parse it (config.ParseBool): --manual=True used to
// fall through to the autonomic daemon, whose flag set then accepted and
// ignored it. The last --manual wins, as with the flag package.
func manualMode(args []string) (bool, error) {
	manual := false
	for _, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") {
			if a == "--" {
				break
			}
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if name != "manual" {
			continue
		}
		if !hasVal {
			manual = true
			continue
		}
		v, err := config.ParseBool(val)
		if err != nil {
			return false, fmt.Errorf("--manual=%s: %w", val, err)
		}
		manual = v
	}
	return manual, nil
}

// cleanupRequested reports whether args ask for --cleanup-only, read as
// manualMode reads --manual: without the flag set, which has refused
// them.
func cleanupRequested(args []string) bool {
	want := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "cleanup-only" {
			continue
		}
		if !hasVal {
			want = true
			continue
		}
		v, err := config.ParseBool(val)
		want = err == nil && v
	}
	return want
}

// cleanupWithoutConfig is --cleanup-only when the configuration or the
// flags are refused (cfgErr): the unit's ExecStopPost must still remove
// what the daemon left, whatever typo a key elsewhere has. It does not
// read the configuration at all (an untrusted file chooses nothing): it
// removes the objects of every sanqos instance that is provably dead
// (its lock is free), which includes this unit's once its daemon has
// exited, and never a live instance's (internal/act/throttle SweepDead).
func cleanupWithoutConfig(ctx context.Context, cfgErr error, log *slog.Logger) error {
	log.Warn("the configuration is refused; removing the leftovers of every dead sanqos instance instead of this one's", "err", cfgErr)
	if os.Geteuid() != 0 {
		return errors.New("--cleanup-only must run as root: it removes iptables chains, ipsets and qdiscs")
	}
	if err := throttle.SweepDead(ctx, log); err != nil {
		return fmt.Errorf("removing the leftovers of dead sanqos instances: %w", err)
	}
	log.Info("leftovers of dead instances removed; fix the configuration before the next start")
	return nil
}

// manualDescription is --help's text in manual mode.
const manualDescription = `Serve manual throttles only: no discovery, no controller. Delays are set,
freed and listed with 'sanqos throttle' through a root-only unix socket.
The flags are those of 'sanqos run' (see 'sanqos run --help'); this mode
uses --backend, --socket, --dev, --queue-num, --small-segment, --ack-delay
and --cleanup-only, from a --config file or the command line.

The nfqueue backend (default) installs an iptables (and ip6tables) chain
SANQOS-<instance> in the mangle table (jumped to from POSTROUTING) and
ipsets named sanqos-<instance>-*, in the current network namespace; run it inside the target's namespace with
'ip netns exec NS sanqos run --manual'. Everything is removed on exit
(Ctrl-C, SIGTERM); leftovers of a killed run are removed at the next start.
If the daemon dies, the kernel lets traffic pass (fail open).
--backend auto starts edt where the kernel and --dev allow it, else
nfqueue; the log says which and why (see 'sanqos run --help').

Write delays hold the pure ACKs and the small segments that clock an iSCSI
writer (R2T, SCSI response); a flow's delay rises gradually so that the
writer's RTT estimate follows it. --ack-delay=false holds only the small
segments.

Read delays are exact only with TCP autocorking off on the target
(sysctl net.ipv4.tcp_autocorking=0): otherwise the tail of a reply waits
for its held first part and a 64 KiB read is delayed twice.`

// runManual serves manual throttles on the control socket until ctx ends.
func runManual(ctx context.Context, o runOptions, log *slog.Logger) error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root: it programs iptables and ipsets and owns a root-only socket")
	}
	if o.cleanupOnly {
		return cleanupOnly(ctx, o, log)
	}

	// The socket first: if another daemon is running, stop here before
	// touching the kernel objects it owns.
	srv, err := ctl.Listen(o.socket, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	resolveBackend(&o, hostSystem{})
	b, err := openBackend(ctx, &o, log)
	if err != nil {
		return err
	}
	log.Info("manual throttling ready", "backend", b.Name(), "socket", o.socket, "ack_delay", o.backend.AckDelay)
	hctx, stopHangups := context.WithCancel(ctx)
	defer stopHangups()
	go func() {
		for {
			select {
			case <-hctx.Done():
				return
			case <-hangups: // signals.go: SIGHUP must not end the daemon
				log.Info("SIGHUP: manual mode has no configuration to reload; throttles unchanged")
			}
		}
	}()
	h := ctl.NewManualHandler(b)
	if err := h.Overrides.SetReadRates(o.config.Manual.ReadRates, o.ports); err != nil {
		return errors.Join(err, b.Close())
	}
	if err := h.Apply(ctx); err != nil {
		return errors.Join(fmt.Errorf("applying manual.read_rates: %w", err), b.Close())
	}
	// A backend whose delays lapse unless renewed (edt) is renewed as
	// the autonomic daemon's tick would: every 100 ms.
	go h.RenewEvery(hctx, 100*time.Millisecond, log)
	serveErr := srv.Serve(ctx, h)
	if err := b.Close(); err != nil {
		return errors.Join(serveErr, fmt.Errorf("removing the data path: %w", err))
	}
	log.Info("stopped; data path removed")
	return serveErr
}
