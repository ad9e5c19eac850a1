package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// tgtadm runs tgtadm against the lab's tgtd only (its own control port).
func tgtadm(ctx context.Context, r runner, args ...string) ([]byte, error) {
	return r.run(ctx, "tgtadm", append([]string{"-C", strconv.Itoa(ControlPort)}, args...)...)
}

// startDetached starts a long-lived lab process (tgtd, the emulated disk)
// in its own session, so that it outlives `sanqos lab up` and a Ctrl-C to
// the terminal does not reach it; Cleanup ends it by the pid it records.
func startDetached(argv []string, logPath, pidPath string) (*os.Process, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log for %s: %w", argv[0], err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", strings.Join(argv, " "), err)
	}
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("recording pid of %s: %w", argv[0], err)
	}
	// Reap it when it exits so that a dead process is not mistaken for a
	// live one (a zombie still answers kill 0) while this process runs.
	go func() { _ = cmd.Wait() }()
	return cmd.Process, nil
}

// startTgtd runs tgtd in the target namespace and waits until its
// management port answers.
func startTgtd(ctx context.Context, r runner) error {
	argv := []string{"ip", "netns", "exec", TargetNS, "tgtd", "-f", "-C", strconv.Itoa(ControlPort)}
	p, err := startDetached(argv, StateDir+"/tgtd.log", tgtdPidFile())
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := tgtadm(ctx, r, "--mode", "sys", "--op", "show")
		if err == nil {
			return nil
		}
		if !alive(p.Pid) {
			log, _ := os.ReadFile(StateDir + "/tgtd.log")
			return fmt.Errorf("tgtd exited at start: %s", strings.TrimSpace(string(log)))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for tgtd on control port %d: %w", ControlPort, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// configureTargets creates one target and LUN per initiator, backed by the
// initiator's loop device with direct I/O, reachable only from its IP.
func configureTargets(ctx context.Context, r runner, inits []Initiator) error {
	for i, in := range inits {
		tid := strconv.Itoa(i + 1)
		steps := [][]string{
			{"--lld", "iscsi", "--mode", "target", "--op", "new", "--tid", tid, "--targetname", in.IQN},
			{"--lld", "iscsi", "--mode", "logicalunit", "--op", "new", "--tid", tid, "--lun", "1",
				"--backing-store", "/dev/" + in.Loop, "--bstype", "rdwr", "--bsoflags", "direct"},
			{"--lld", "iscsi", "--mode", "target", "--op", "bind", "--tid", tid, "--initiator-address", in.IP.String()},
		}
		for _, s := range steps {
			if _, err := tgtadm(ctx, r, s...); err != nil {
				return fmt.Errorf("configuring target %s: %w", in.IQN, err)
			}
		}
	}
	return nil
}

// alive reports whether a process exists.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// stopPid ends one process the lab started: SIGTERM, then SIGKILL after
// grace. want must occur in its command line, so a pid file that outlived
// its process never leads to killing an unrelated process that reused
// the pid.
func stopPid(pid int, want string, grace time.Duration) error {
	if !alive(pid) {
		return nil
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), want) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stopping %s (pid %d): %w", want, pid, err)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !alive(pid) || isZombie(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && alive(pid) {
		return fmt.Errorf("killing %s (pid %d): %w", want, pid, err)
	}
	// Return only when it is gone: its mounts and loop devices are
	// released at exit, and cleanup goes on to remove them.
	if err := realProcs.waitGone([]int{pid}, killWait); err != nil {
		return fmt.Errorf("%s: %w", want, err)
	}
	return nil
}

// isZombie reports a process that has exited but was not yet reaped.
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z'
	}
	return false
}

// readPid reads a pid file (0 when there is none).
func readPid(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}
