package config

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkPermissions is whether Load checks who can change the file: when
// sanqos runs as root, as the unit runs it. A variable for tests.
var checkPermissions = os.Geteuid() == 0

// checkTrusted refuses a configuration that a user other than root can
// change: the file (f, open at path) and every directory above it must
// be root's and writable by no one else (a directory with the sticky bit,
// like /tmp, only keeps others from replacing what is root's). The
// configuration chooses what root runs and writes (record, socket,
// discovery adapter, ports), so whoever can write it acts as root.
func checkTrusted(path string, f *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("checking the permissions of config %s: %w", path, err)
	}
	if why := untrusted(st, false); why != "" {
		return fmt.Errorf("config %s %s: whoever can change it decides what sanqos does as root; run 'chown root:root %s && chmod go-w %s', then start again", path, why, path, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("checking the permissions of config %s: %w", path, err)
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return fmt.Errorf("checking the permissions of config %s: %w", path, err)
	}
	for dir := filepath.Dir(real); ; dir = filepath.Dir(dir) {
		if err := syscall.Stat(dir, &st); err != nil {
			return fmt.Errorf("checking the permissions of config %s: %w", path, err)
		}
		if why := untrusted(st, true); why != "" {
			return fmt.Errorf("config %s is in directory %s, which %s: whoever can change it can replace the config and so decide what sanqos does as root; run 'chown root %s && chmod go-w %s', or keep the config in a root-only directory like /etc/sanqos", path, dir, why, dir, dir)
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

// untrusted says why st, a file or (isDir) a directory, can be changed
// by a user other than root, or "" if it cannot.
func untrusted(st syscall.Stat_t, isDir bool) string {
	perm := st.Mode & 0o7777
	switch {
	case st.Uid != 0:
		return fmt.Sprintf("belongs to uid %d, not root", st.Uid)
	case isDir && perm&0o1000 != 0:
		return "" // sticky: others cannot replace root's entries
	case perm&0o002 != 0:
		return fmt.Sprintf("is writable by every user (mode %04o)", perm)
	case perm&0o020 != 0:
		return fmt.Sprintf("is writable by its group (gid %d, mode %04o)", st.Gid, perm)
	}
	return ""
}
