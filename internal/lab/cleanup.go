package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
)

// Cleanup removes everything a lab created, whether or not the lab that
// created it is still running: processes in the lab's namespaces, tgtd,
// nfs-ganesha and rpcbind, the NFS export's mount, the emulated disk,
// loop devices over lab images, mounts under the lab's directories, the
// namespaces themselves (and with them every interface, bridge and
// iptables rule in them), tgtd's control socket, the images and the
// state directory. It is idempotent and is what `sanqos lab down` does.
//
// It refuses, without touching anything, while another process's Lab is
// up: that lab is removed by its owner.
func Cleanup(ctx context.Context) error {
	lk, err := tryLock()
	if err != nil {
		return err
	}
	defer lk.release()
	return cleanup(ctx, execRunner{}, nil)
}

// cleanup is Cleanup with the step that stops an emulated disk served by
// this process (stopEmu, may be nil) between detaching the loop devices
// that use it and unmounting it.
func cleanup(ctx context.Context, r runner, stopEmu func()) error {
	// Cleanup must finish even when the caller's context was cancelled
	// (Ctrl-C is the usual reason to clean up).
	ctx = context.WithoutCancel(ctx)
	st, _ := readState() // best effort: what a crashed run recorded
	errs := stopLabProcesses(ctx, r)
	// The NFS export's file system holds its loop device: unmounted
	// before the loops are detached, while the emulated disk still
	// answers its last writes.
	errs = append(errs, stopNFS()...)
	if err := detachLabLoops(ctx, r); err != nil {
		errs = append(errs, err)
	}
	if stopEmu != nil {
		stopEmu()
	}
	if err := stopPid(readPid(emuPidFile()), "diskemu", 5*time.Second); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, removeLabObjects(ctx, r, st)...)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleaning up the lab: %w", err)
	}
	return nil
}

// stopLabProcesses stops what runs in the lab's namespaces, first: they
// hold loop devices (tgtd) and mounts open. Initiators first, so that
// load generators log out while the target still answers; then the rest
// (a daemon under test gets a chance to remove its rules); tgtd last and
// killed outright, as it ignores SIGTERM while it has targets and waiting
// for it would only cost time.
func stopLabProcesses(ctx context.Context, r runner) []error {
	var errs []error
	var initiators, others, tgtds []int
	for _, ns := range Namespaces() {
		if !nsExists(ns) {
			continue
		}
		out, err := r.run(ctx, "ip", "netns", "pids", ns)
		if err != nil {
			errs = append(errs, fmt.Errorf("listing processes in %s: %w", ns, err))
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			switch {
			case isTgtd(pid):
				tgtds = append(tgtds, pid)
			case ns == TargetNS || ns == SwitchNS:
				others = append(others, pid)
			default:
				initiators = append(initiators, pid)
			}
		}
	}
	if pid := readPid(tgtdPidFile()); pid != 0 && isTgtd(pid) {
		tgtds = append(tgtds, pid)
	}
	for _, group := range []struct {
		pids  []int
		sig   syscall.Signal
		grace time.Duration
	}{{initiators, syscall.SIGTERM, 3 * time.Second}, {others, syscall.SIGTERM, 3 * time.Second}, {tgtds, syscall.SIGKILL, 2 * time.Second}} {
		if err := stopAll(group.pids, group.sig, group.grace); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func isTgtd(pid int) bool {
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(comm)) == "tgtd"
}

// removeLabObjects removes, once nothing runs, the lab's mounts,
// namespaces, tgtd sockets, images and directories.
func removeLabObjects(ctx context.Context, r runner, st *State) []error {
	var errs []error
	mounts, err := labMounts()
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range mounts {
		// Lazy: a mount whose server died answers nothing, and a plain
		// unmount of it would hang or fail with "busy".
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	for _, ns := range Namespaces() {
		if !nsExists(ns) {
			continue
		}
		// A namespace that vanished meanwhile (an interrupted `ip netns
		// add` removes its own) is as good as deleted.
		if _, err := r.run(ctx, "ip", "netns", "del", ns); err != nil && nsExists(ns) {
			errs = append(errs, fmt.Errorf("deleting namespace: %w", err))
		}
	}
	for _, p := range tgtdSockets() {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing tgtd socket: %w", err))
		}
	}
	if st != nil && st.Storage.Kind == "dir" {
		images := []string{filepath.Join(st.Storage.Dir, nfsImageName)}
		for _, in := range st.Initiators {
			images = append(images, in.Image)
		}
		for _, img := range images {
			if err := os.Remove(img); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing LUN image: %w", err))
			}
		}
	}
	for _, d := range []string{StateDir, DataDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	return errs
}

// procOps are the process operations of stopAll; realProcs acts on this
// machine, tests pass their own.
type procOps struct {
	kill  func(pid int, sig syscall.Signal) error
	gone  func(pid int) bool
	sleep func(time.Duration)
	now   func() time.Time
}

var realProcs = procOps{
	kill:  syscall.Kill,
	gone:  func(pid int) bool { return !alive(pid) || isZombie(pid) },
	sleep: time.Sleep,
	now:   time.Now,
}

// killWait bounds the wait for a SIGKILLed process to be gone: tgtd
// closing loop devices with I/O outstanding on the emulated disk takes
// seconds, and 'lab down' must not return before it is done (the next
// 'lab up' would find the devices busy).
const killWait = 15 * time.Second

// stopAll sends sig to every pid, waits up to grace for all of them, then
// SIGKILLs those left and waits until they are gone. These are processes
// inside the lab's own namespaces (or tgtd, which the lab started), which
// only the lab and its users start.
func stopAll(pids []int, sig syscall.Signal, grace time.Duration) error {
	return realProcs.stopAll(pids, sig, grace)
}

func (p procOps) stopAll(pids []int, sig syscall.Signal, grace time.Duration) error {
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = p.kill(pid, sig)
	}
	if p.waitGone(pids, grace) == nil {
		return nil
	}
	for _, pid := range pids {
		if !p.gone(pid) {
			_ = p.kill(pid, syscall.SIGKILL)
		}
	}
	return p.waitGone(pids, killWait)
}

// waitGone polls until every pid is gone (exited, or a zombie: its
// resources are released), or timeout.
func (p procOps) waitGone(pids []int, timeout time.Duration) error {
	deadline := p.now().Add(timeout)
	for {
		var left []string
		for _, pid := range pids {
			if !p.gone(pid) {
				left = append(left, strconv.Itoa(pid))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if !p.now().Before(deadline) {
			return fmt.Errorf("processes %s still running %v after they were told to stop", strings.Join(left, ", "), timeout)
		}
		p.sleep(50 * time.Millisecond)
	}
}

// labMounts lists mount points under the lab's directories, deepest first.
func labMounts() ([]string, error) {
	mounts, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	return labMountPoints(mounts), nil
}

// labMountPoints picks the lab's mount points out of mounts, deepest
// first (mountinfo lists parents before children), so nested mounts come
// off before their parents.
func labMountPoints(mounts []mountinfo.Mount) []string {
	var out []string
	for i := len(mounts) - 1; i >= 0; i-- {
		if mp := mounts[i].Point; under(mp, StateDir) || under(mp, DataDir) {
			out = append(out, mp)
		}
	}
	return out
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
