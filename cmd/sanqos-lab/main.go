// Command sanqos-lab is sanqos's laboratory: it rebuilds the thesis's
// iSCSI testbed on this machine (network namespaces, tgt, an emulated
// disk), runs the experiments and writes their reports, boots Debian's
// kernels under qemu for the kernel-stack tests, and runs the simulator.
//
// It is a separate binary from the daemon so that the daemon, which runs
// on the storage target's data path, links neither the FUSE file system
// of the emulated disk nor the plotting library. 'sanqos lab …' and
// 'sanqos sim …' hand over to it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the lab command named by args[0] (as 'sanqos lab' takes
// it) and returns the exit code.
func dispatch(args []string, stdout, stderr io.Writer) int {
	// SIGHUP ends a lab command like SIGTERM does, through its context,
	// so that the lab is taken down.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	err := cmdLab(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		name := "lab"
		if len(args) > 0 {
			name = args[0]
		}
		fmt.Fprintf(stderr, "sanqos lab %s: %v\n", name, err)
		return 1
	}
}
