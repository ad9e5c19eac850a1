package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Status is the health of the lab as found on the machine now.
type Status struct {
	// Up is true when a lab was brought up and nothing is found missing.
	Up bool `json:"up"`
	// State is what Up recorded (nil when there is no lab).
	State *State `json:"state,omitempty"`
	// TgtdPid is the running tgtd's pid (0: not running).
	TgtdPid int `json:"tgtd_pid"`
	// Targets is how many targets tgtd reports.
	Targets int `json:"targets"`
	// Problems lists what is missing or wrong, one sentence each.
	Problems []string `json:"problems,omitempty"`
}

// ReadStatus checks the recorded lab against the machine.
func ReadStatus(ctx context.Context) (*Status, error) {
	return readStatus(ctx, execRunner{}, "/sys")
}

func readStatus(ctx context.Context, r runner, sysRoot string) (*Status, error) {
	st, err := readState()
	if err != nil {
		return nil, err
	}
	s := &Status{State: st}
	if st == nil {
		for _, ns := range Namespaces() {
			if nsExists(ns) {
				s.Problems = append(s.Problems, fmt.Sprintf("namespace %s exists without a recorded lab: run 'sanqos lab down'", ns))
			}
		}
		return s, nil
	}
	problem := func(f string, a ...any) { s.Problems = append(s.Problems, fmt.Sprintf(f, a...)) }
	for _, ns := range Namespaces() {
		if !nsExists(ns) {
			problem("network namespace %s is missing", ns)
		}
	}
	if pid := readPid(tgtdPidFile()); alive(pid) && !isZombie(pid) {
		s.TgtdPid = pid
		out, err := tgtadm(ctx, r, "--lld", "iscsi", "--mode", "target", "--op", "show")
		if err != nil {
			problem("tgtd does not answer: %v", err)
		} else {
			s.Targets = countTargets(out)
		}
	} else {
		problem("tgtd is not running")
	}
	if s.Targets != len(st.Initiators) {
		problem("tgtd has %d targets, want %d", s.Targets, len(st.Initiators))
	}
	for _, in := range st.Initiators {
		if in.Loop == "" {
			problem("initiator %s has no loop device", in.Name)
			continue
		}
		dio, err := os.ReadFile(filepath.Join(sysRoot, "block", in.Loop, "loop", "dio"))
		switch {
		case err != nil:
			problem("loop device %s of %s is gone", in.Loop, in.Name)
		case strings.TrimSpace(string(dio)) != "1":
			problem("loop device %s of %s lost direct I/O", in.Loop, in.Name)
		}
	}
	if st.EmuMount != "" {
		mounts, err := labMounts()
		if err != nil {
			problem("%v", err)
		} else if !contains(mounts, st.EmuMount) {
			problem("the emulated disk is not mounted at %s", st.EmuMount)
		}
		if pid := readPid(emuPidFile()); pid != 0 && (!alive(pid) || isZombie(pid)) {
			problem("the emulated disk's process (pid %d) is gone", pid)
		}
	}
	if st.NFS != nil {
		s.Problems = append(s.Problems, nfsProblems(st.NFS)...)
	}
	if nsExists(TargetNS) {
		if o, err := readOffloads(ctx, r, TargetNS, ifName); err == nil {
			st.Offloads = o
		} else {
			problem("%v", err)
		}
		if cc, err := readCongestionControl(ctx, r, TargetNS); err == nil {
			st.TCPCongestionControl = cc
		} else {
			problem("%v", err)
		}
	}
	s.Up = len(s.Problems) == 0
	return s, nil
}

// countTargets counts "Target N: iqn…" lines of `tgtadm --op show`.
func countTargets(out []byte) int {
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "Target ") {
			n++
		}
	}
	return n
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
