package discover

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
)

// denyReadlink makes reading the links of /proc/PID/fd fail as the kernel
// fails it for a process without CAP_SYS_PTRACE (sanqos under the unit's
// capability bounding set) when the server runs as root with full
// capabilities: the directory lists, its links do not read.
func denyReadlink(t *testing.T) {
	t.Helper()
	orig := readlink
	readlink = func(p string) (string, error) {
		if strings.Contains(p, "/fd/") {
			return "", &fs.PathError{Op: "readlink", Path: p, Err: syscall.EACCES}
		}
		return orig(p)
	}
	t.Cleanup(func() { readlink = orig })
}

// TestSocketNoPtrace (N5): without CAP_SYS_PTRACE the socket adapter
// blamed "a kernel server such as knfsd?", because holds took EACCES for
// "holds nothing". The error must name the permission and the capability,
// for ganesha (found by its listening socket) and for qemu-nbd (whose
// open files are what it serves).
func TestSocketNoPtrace(t *testing.T) {
	for _, cfg := range []SocketConfig{
		{Ports: []int{2049}, ProcRoot: "testdata/socket/ganesha/proc", SysRoot: "testdata/socket/ganesha/sys", FileRoot: "testdata/socket/ganesha/root"},
		{Ports: []int{10809}, ProcRoot: "testdata/socket/qemu-nbd/proc", SysRoot: "testdata/socket/ganesha/sys"},
	} {
		t.Run(strings.TrimPrefix(cfg.ProcRoot, "testdata/socket/"), func(t *testing.T) {
			denyReadlink(t)
			s, err := NewSocket(cfg)
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Attachments(t.Context())
			if err == nil {
				t.Fatal("no error although no process's open files could be read")
			}
			if strings.Contains(err.Error(), "knfsd") {
				t.Errorf("err %q blames a kernel server for a missing capability", err)
			}
			if !errors.Is(err, errNoPtrace) || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "CAP_SYS_PTRACE") {
				t.Errorf("err %q: want permission denied naming CAP_SYS_PTRACE", err)
			}
		})
	}
}

// TestServedFilesNoPtrace: a listener found (by the hint) but whose open
// files cannot be read is an error, not a server that serves nothing.
func TestServedFilesNoPtrace(t *testing.T) {
	const proc = "testdata/socket/qemu-nbd/proc"
	ents, err := os.ReadDir(proc)
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, e := range ents {
		if l, err := readListener(proc, atoi(e.Name())); err == nil && l.Comm == "qemu-nbd" {
			pid = l.PID
		}
	}
	if pid == 0 {
		t.Fatal("no qemu-nbd in the fixture")
	}
	if files, err := servedFiles(proc, pid); err != nil || len(files) == 0 {
		t.Fatalf("readable: %v, %v; want the image", files, err)
	}
	denyReadlink(t)
	files, err := servedFiles(proc, pid)
	if !errors.Is(err, errNoPtrace) {
		t.Errorf("denied: %v, %v; want an error naming CAP_SYS_PTRACE", files, err)
	}
}

// TestHoldsProcessGone: a process that exits between the listing and the
// read holds nothing, without an error.
func TestHoldsProcessGone(t *testing.T) {
	ok, err := holds("testdata/socket/qemu-nbd/proc", 999999, "socket:[1]")
	if ok || err != nil {
		t.Errorf("holds of a missing process = %v, %v; want false, nil", ok, err)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}
