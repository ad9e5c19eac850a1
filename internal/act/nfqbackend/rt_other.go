//go:build !linux

package nfqbackend

import (
	"errors"
	"runtime"
)

// Elsewhere than on Linux the packet path's threads keep the scheduler's
// defaults: the backend itself (NFQUEUE) exists only on Linux, and these
// stubs only let the package's portable parts build.

// boost only locks the calling goroutine to its thread.
func (b *Nfqueue) boost(cpu int, _ string, _ bool) (undo func()) {
	runtime.LockOSThread()
	b.log.Warn("packet path runs at normal priority: real-time placement is Linux only", "cpu", cpu)
	return runtime.UnlockOSThread
}

// raiseOtherThreads cannot renice threads here.
func raiseOtherThreads(proc string) error {
	return errors.New("thread priorities are set on Linux only")
}

// pathCPUs has no affinity to read: one CPU, no standby.
func pathCPUs() (packet, standby int) { return 0, -1 }
