package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// hangups receives SIGHUP while 'sanqos run' runs: the autonomic daemon
// reloads its configuration, manual mode says there is nothing to
// reload. Every other command ends on SIGHUP as on SIGTERM, through its
// context, so that it cleans up: the default action of SIGHUP killed the
// daemon (exit 129) with its iptables chain and ipsets in place.
var hangups = make(chan os.Signal, 1)

// brokenPipes takes SIGPIPE in 'run' and is never read: a full channel
// drops further signals, which is all that is wanted of them.
var brokenPipes = make(chan os.Signal, 1)

// signalContext returns the context a command runs under: cancelled by
// SIGINT and SIGTERM, and by SIGHUP except for 'run', where SIGHUP goes
// to hangups.
func signalContext(cmd string) (context.Context, context.CancelFunc) {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if cmd == "run" {
		signal.Notify(hangups, syscall.SIGHUP)
		// A write to a closed stdout or stderr (a log reader gone) would
		// kill the daemon with SIGPIPE, leaving its kernel objects in
		// place; caught, the write fails and the daemon goes on. Notify,
		// not Ignore: an ignored signal stays ignored in the children
		// (iptables, tgtadm) across exec.
		signal.Notify(brokenPipes, syscall.SIGPIPE)
	} else {
		sigs = append(sigs, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	return ctx, func() {
		stop()
		if cmd == "run" {
			signal.Stop(hangups)
		}
	}
}
