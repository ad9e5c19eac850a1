package discover

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
)

// A server may run in a mount namespace of its own (nfs-ganesha with a
// private /run, a container): the paths it serves are its namespace's,
// and the same path in sanqos's namespace may be another file system or
// none. Such paths are resolved here, through the server's own mount
// table, to the block device that holds them, which is the same device
// in every namespace. In sanqos's own namespace the paths stay as they
// are: the topology resolver walks them (and names file systems better).

// inOwnMountNS reports whether process pid shares our mount namespace.
// When either link cannot be read (a fixture without them, a process
// gone) the answer is yes: the paths are then resolved as they are.
func inOwnMountNS(procRoot string, pid int) bool {
	mine, err1 := os.Readlink(filepath.Join(procRoot, "self", "ns", "mnt"))
	theirs, err2 := os.Readlink(filepath.Join(procRoot, strconv.Itoa(pid), "ns", "mnt"))
	return err1 != nil || err2 != nil || mine == theirs
}

// devicesInNS maps each path served by process pid (in its own mount
// namespace) to the kernel name of the block device of the mount that
// holds it. Paths under a mount without a block device (tmpfs, FUSE) or
// when the mount table cannot be read stay as they are: the resolver
// then says what it cannot resolve.
func devicesInNS(procRoot, sysRoot string, pid int, paths []string) []string {
	mounts, err := mountinfo.Read(filepath.Join(procRoot, strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return paths
	}
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = p
		if strings.HasPrefix(p, "/dev/") {
			continue // a device node: the same device everywhere
		}
		m, ok := holdingMount(mounts, p)
		if !ok || m.Major == 0 {
			continue
		}
		if t, err := os.Readlink(filepath.Join(sysRoot, "dev", "block", m.Dev())); err == nil {
			out[i] = filepath.Base(t)
		}
	}
	return out
}

// holdingMount returns the mount holding path: the longest mount point
// that is a prefix of it, the later of equal ones (it is on top).
func holdingMount(mounts []mountinfo.Mount, path string) (mountinfo.Mount, bool) {
	path = filepath.Clean(path)
	best, found := mountinfo.Mount{}, false
	for _, m := range mounts {
		if m.Point != "/" && path != m.Point && !strings.HasPrefix(path, m.Point+"/") {
			continue
		}
		if !found || len(m.Point) >= len(best.Point) {
			best, found = m, true
		}
	}
	return best, found
}
