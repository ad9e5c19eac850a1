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
// (a kernel server such as knfsd). If no process was found to hold it
// but some processes' open files could not be read, that is an error
// (errNoPtrace): the holder may well be one of them.
func findListener(procRoot string, ino uint64, hint int) (listener, bool, error) {
	want := "socket:[" + strconv.FormatUint(ino, 10) + "]"
	var (
		denied    []int
		firstDeny error
	)
	deny := func(pid int, err error) {
		if firstDeny == nil {
			firstDeny = err
		}
		denied = append(denied, pid)
	}
	if hint > 0 {
		ok, err := holds(procRoot, hint, want)
		if ok {
			l, err := readListener(procRoot, hint)
			return l, err == nil, err
		}
		if err != nil {
			deny(hint, err)
		}
	}
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return listener{}, false, fmt.Errorf("listing processes: %w", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == hint {
			continue
		}
		ok, err := holds(procRoot, pid, want)
		if err != nil {
			deny(pid, err)
			continue
		}
		if ok {
			l, err := readListener(procRoot, pid)
			return l, err == nil, err
		}
	}
	if len(denied) > 0 {
		return listener{}, false, noPtraceError(denied, firstDeny)
	}
	return listener{}, false, nil
}

// readlink is os.Readlink; a test replaces it to deny what the kernel
// denies a process without CAP_SYS_PTRACE.
var readlink = os.Readlink

// errNoPtrace is what reading another process's open files fails with
// when the kernel's ptrace access check refuses it: the server runs as
// root with capabilities sanqos lacks (a unit's CapabilityBoundingSet),
// and only CAP_SYS_PTRACE lets it read /proc/PID/fd then.
var errNoPtrace = errors.New("sanqos needs CAP_SYS_PTRACE to read the open files of a server that runs as root (add it to the unit's CapabilityBoundingSet), or name what the server serves with discovery.exports")

// noPtraceError says which processes could not be read, naming a few,
// with the first denial.
func noPtraceError(pids []int, first error) error {
	var names []string
	for i, p := range pids {
		if i == 5 {
			names = append(names, "...")
			break
		}
		names = append(names, strconv.Itoa(p))
	}
	return fmt.Errorf("no readable process holds the listening socket; the open files of %d could not be read (pid %s: %w): %w", len(pids), strings.Join(names, ", "), first, errNoPtrace)
}

// holds reports whether process pid has an open file whose link is want.
// A process that exits meanwhile holds nothing. One whose open files may
// not be read (the ptrace access check: listing /proc/PID/fd is allowed,
// reading its links is not) is an error, not "holds nothing": swallowed,
// it made a missing capability look like a kernel server.
func holds(procRoot string, pid int, want string) (bool, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return false, err
		}
		return false, nil
	}
	for _, fd := range fds {
		t, err := readlink(filepath.Join(dir, fd.Name()))
		if errors.Is(err, fs.ErrPermission) {
			return false, err
		}
		if err == nil && t == want {
			return true, nil
		}
	}
	return false, nil
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
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("reading the open files of process %d (%w): %w", pid, err, errNoPtrace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the open files of process %d: %w", pid, err)
	}
	var out []string
	for _, fd := range fds {
		t, err := readlink(filepath.Join(base, "fd", fd.Name()))
		if errors.Is(err, fs.ErrPermission) {
			// Skipped, a denied file would leave a server that serves
			// nothing: say why instead.
			return nil, fmt.Errorf("reading the open files of process %d (%w): %w", pid, err, errNoPtrace)
		}
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
