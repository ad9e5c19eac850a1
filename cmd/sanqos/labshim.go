package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// labBinary is the separate binary of the lab and the simulator. The
// daemon does not carry them: they bring a FUSE file system and plotting
// that have no place on a storage target's data path, so 'sanqos lab' and
// 'sanqos sim' hand over to it.
const labBinary = "sanqos-lab"

func cmdLab(_ context.Context, args []string, _, _ io.Writer) error {
	return execLab(args)
}

func cmdSim(_ context.Context, args []string, _, _ io.Writer) error {
	return execLab(append([]string{"sim"}, args...))
}

// execLab replaces this process with sanqos-lab, found next to this
// executable or in PATH, so that signals, exit codes and the terminal are
// the lab's own.
func execLab(args []string) error {
	path, err := findLabBinary()
	if err != nil {
		return err
	}
	return syscall.Exec(path, append([]string{path}, args...), os.Environ())
}

func findLabBinary() (string, error) {
	self, err := os.Executable()
	if err == nil {
		p := filepath.Join(filepath.Dir(self), labBinary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(labBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s is not installed next to this binary or in PATH: the lab and the simulator are a separate binary; build it with 'make build' (bin/%s)", labBinary, labBinary)
}
