package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// lockName is an abstract Unix socket (in the host's network namespace)
// that marks the lab as in use. There is one lab per machine, and tests
// of several packages (the lab's, the experiments', the daemon's) may run
// at once during development: each would otherwise clear the other's lab
// as a crashed run's leftovers. An abstract socket is released by the
// kernel when its holder dies, and leaves no file behind.
const lockName = "@sanqos-lab"

// ErrInUse says another process holds the lab (Cleanup returns it then).
var ErrInUse = errors.New("the lab is in use by another process (a test or experiment); it removes the lab itself when it ends")

// labLock is held for as long as a Lab value lives (or, for `sanqos lab
// up`, while the lab is being built).
type labLock struct{ l *net.UnixListener }

func tryLock() (*labLock, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: lockName, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, ErrInUse
	}
	if err != nil {
		return nil, fmt.Errorf("taking the lab lock: %w", err)
	}
	return &labLock{l}, nil
}

// lock waits until the lab is free, saying once that it waits.
func lock(ctx context.Context, progress io.Writer) (*labLock, error) {
	said := false
	for {
		lk, err := tryLock()
		if !errors.Is(err, ErrInUse) {
			return lk, err
		}
		if !said && progress != nil {
			fmt.Fprintf(progress, "lab up: waiting: %v\n", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the lab: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (lk *labLock) release() {
	if lk != nil && lk.l != nil {
		_ = lk.l.Close()
		lk.l = nil
	}
}

// Hold takes the lab's lock, waiting while another process holds it, for
// work that needs no lab but must not run beside one (the data path
// experiment, which measures CPU); release gives it back.
func Hold(ctx context.Context, progress io.Writer) (release func(), err error) {
	lk, err := lock(ctx, progress)
	if err != nil {
		return nil, err
	}
	return lk.release, nil
}
