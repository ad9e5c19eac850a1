package discover

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The process behind a listening socket, and what it serves. A socket's
// inode appears in the table (procnet.go) and, as the link text
// "socket:[INODE]", among the open files of the process that holds it.

// listener is a process that holds a listening socket.
type listener struct {
	PID  int
	Comm string   // /proc/PID/comm: "ganesha.nfsd", "qemu-nbd"
	Args []string // /proc/PID/cmdline
}

// findListener returns the process holding the socket with inode ino.
// hint is a PID to try first (the one found last time): a server keeps
// its listening socket for its life, so the walk of every process is
// needed only when it restarted. ok is false when no process holds it
// (a kernel server such as knfsd).
func findListener(procRoot string, ino uint64, hint int) (listener, bool, error) {
	want := "socket:[" + strconv.FormatUint(ino, 10) + "]"
	if hint > 0 && holds(procRoot, hint, want) {
		l, err := readListener(procRoot, hint)
		return l, err == nil, err
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return listener{}, false, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if holds(procRoot, pid, want) {
			l, err := readListener(procRoot, pid)
			return l, err == nil, err
		}
	}
	return listener{}, false, nil
}

// holds reports whether process pid has an open file whose link is want.
// A process that exits meanwhile, or whose fds we may not read, holds
// nothing.
func holds(procRoot string, pid int, want string) bool {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if t, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && t == want {
			return true
		}
	}
	return false
}

func readListener(procRoot string, pid int) (listener, error) {
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	comm, err := os.ReadFile(filepath.Join(base, "comm"))
	if err != nil {
		return listener{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	cmd, err := os.ReadFile(filepath.Join(base, "cmdline"))
	if err != nil {
		return listener{}, fmt.Errorf("reading process %d: %w", pid, err)
	}
	var args []string
	for _, a := range bytes.Split(bytes.TrimRight(cmd, "\x00"), []byte{0}) {
		args = append(args, string(a))
	}
	return listener{PID: pid, Comm: strings.TrimSpace(string(comm)), Args: args}, nil
}

// Open-file flags as /proc/PID/fdinfo shows them (octal), from the
// kernel's asm-generic/fcntl.h.
const (
	oAccMode = 0o3
	oWronly  = 0o1
	oAppend  = 0o2000
)

// notServed are the directories whose files a server opens for itself,
// not for its clients: its logs, runtime state and the kernel's files.
var notServed = []string{"/proc/", "/sys/", "/run/", "/var/log/", "/var/run/"}

// servedFiles lists what process pid serves: its open block devices and
// regular files opened for reading (a disk image or a file of an
// export), sorted and without duplicates. Files opened write-only or for
// appending are its logs, not data it serves; character devices
// (/dev/null, terminals), sockets, pipes and deleted files are skipped.
func servedFiles(procRoot string, pid int) ([]string, error) {
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	fds, err := os.ReadDir(filepath.Join(base, "fd"))
	if err != nil {
		return nil, fmt.Errorf("reading the open files of process %d: %w", pid, err)
	}
	var out []string
	for _, fd := range fds {
		t, err := os.Readlink(filepath.Join(base, "fd", fd.Name()))
		if err != nil || !filepath.IsAbs(t) || strings.HasSuffix(t, " (deleted)") {
			continue
		}
		if slices.ContainsFunc(notServed, func(p string) bool { return strings.HasPrefix(t, p) }) {
			continue
		}
		if strings.HasPrefix(t, "/dev/") && !isBlockDevice(t) {
			continue
		}
		flags, err := fdFlags(filepath.Join(base, "fdinfo", fd.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // closed meanwhile
			}
			return nil, err
		}
		if flags&oAccMode == oWronly || flags&oAppend != 0 {
			continue
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// isBlockDevice reports whether path is a block device node here. In a
// fixture tree the path does not exist: names under /dev/ that the
// kernel gives block devices are taken by name then.
func isBlockDevice(path string) bool {
	if fi, err := os.Stat(path); err == nil {
		return fi.Mode()&fs.ModeDevice != 0 && fi.Mode()&fs.ModeCharDevice == 0
	}
	n := strings.TrimPrefix(path, "/dev/")
	for _, p := range []string{"loop", "sd", "vd", "nvme", "dm-", "md", "nbd", "mapper/", "xvd"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// fdFlags reads the "flags:" line of an fdinfo file.
func fdFlags(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "flags:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: flags %q: %w", path, v, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%s: no flags line", path)
}
