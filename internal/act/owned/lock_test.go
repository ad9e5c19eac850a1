package owned

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sanqos/sanqos/internal/act/acttest"
)

// TestOwnerLockSquatterIgnored (audit round 2, N2): a process of uid
// 65534 that binds the abstract name an instance lock used to be keeps
// neither the instance nor a clean-up of it from taking the lock, while
// a live holder of the lock still keeps every other taker out.
func TestOwnerLockSquatterIgnored(t *testing.T) {
	inst := testInstance("sq")
	acttest.Squat(t, "", inst)
	acttest.RemoveLockFile(t, LockPath, 0, inst)
	if uid, found, err := abstractOwner("sanqos-instance-" + inst); err != nil || !found || uid != 65534 {
		t.Fatalf("abstractOwner: uid %d, found %v, %v; want the squatter's 65534", uid, found, err)
	}
	lk, err := LockInstance(0, inst)
	if err != nil {
		t.Fatalf("an unprivileged squatter of the old lock name kept the instance out: %v", err)
	}
	if lk2, err := LockInstance(0, inst); !errors.Is(err, ErrInstanceRunning) {
		lk2.Release()
		t.Fatalf("a second taker of a held lock: %v, want ErrInstanceRunning", err)
	}
	if lk3, dead := TryLockDead(0, inst); dead {
		lk3.Release()
		t.Fatal("a clean-up took the lock of a live instance")
	}
	lk.Release()
	if p, _ := LockPath(0, inst); fileExists(p) {
		t.Errorf("%s outlived its release", p)
	}
	lk4, dead := TryLockDead(0, inst)
	if !dead {
		t.Fatal("a released lock stayed taken")
	}
	lk4.Release()
}

// TestOwnerLockDirRefusedUnlessRootOnly (audit round 2, N2): a lock
// directory that another user owns or can write to, or a symlink, is
// refused with an error that says what to do; a missing one is created
// root-only.
func TestOwnerLockDirRefusedUnlessRootOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chowns a directory to uid 65534")
	}
	saved := LockDir
	t.Cleanup(func() { LockDir = saved })
	base := t.TempDir()
	inst := testInstance("ld")

	LockDir = filepath.Join(base, "fresh")
	lk, err := LockInstance(0, inst)
	if err != nil {
		t.Fatalf("a missing lock directory: %v, want it created", err)
	}
	lk.Release()
	var st syscall.Stat_t
	if err := syscall.Stat(LockDir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Mode&0o777 != 0o700 {
		t.Fatalf("created lock directory: uid %d mode %04o, want root's 0700", st.Uid, st.Mode&0o777)
	}

	unsafe := map[string]func(dir string) error{
		"world-writable": func(dir string) error { return os.Chmod(dir, 0o777) },
		"group-writable": func(dir string) error { return os.Chmod(dir, 0o770) },
		"nobody's":       func(dir string) error { return os.Chown(dir, 65534, 65534) },
	}
	for what, spoil := range unsafe {
		LockDir = filepath.Join(base, strings.ReplaceAll(what, "'", ""))
		if err := os.Mkdir(LockDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := spoil(LockDir); err != nil {
			t.Fatal(err)
		}
		if lk, err := LockInstance(0, inst); err == nil || !strings.Contains(err.Error(), "remove it") {
			lk.Release()
			t.Errorf("a %s lock directory: %v, want a refusal that says to remove it", what, err)
		}
	}
	LockDir = filepath.Join(base, "link")
	if err := os.Symlink(filepath.Join(base, "fresh"), LockDir); err != nil {
		t.Fatal(err)
	}
	if lk, err := LockInstance(0, inst); err == nil {
		lk.Release()
		t.Error("a symlinked lock directory was used")
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// TestOwnerLockStaleFileIsNotALock: a taker that opened the lock file
// just before its holder removed it (release) and locked it after must
// not count as holding the lock: the lock is on the file the name leads
// to now.
func TestOwnerLockStaleFileIsNotALock(t *testing.T) {
	inst := testInstance("st")
	acttest.RemoveLockFile(t, LockPath, 0, inst)
	p, err := LockPath(0, inst)
	if err != nil {
		t.Fatal(err)
	}
	a, err := LockInstance(0, inst)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(LockDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	old, err := os.Open(p) // a taker, between its open and its flock
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	a.Release()
	b, err := LockInstance(0, inst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	// The late taker's flock on the removed file succeeds; openLocked
	// must see the file is stale and lock the current one, held by b.
	if fd, err := openLocked(int(dir.Fd()), filepath.Base(p)); err == nil {
		syscall.Close(fd)
		t.Fatal("a second holder while b holds the lock")
	}
	if err := syscall.Flock(int(old.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("flock on the removed file: %v (the case openLocked guards against did not arise)", err)
	}
}

// TestOwnerLockOlderVersionStillCounts: root holding the abstract name
// is a sanqos of an earlier version still running (during an upgrade,
// say): the new lock file is free, but the instance is refused all the
// same, so that a new --cleanup-only never removes a live old instance's
// objects.
func TestOwnerLockOlderVersionStillCounts(t *testing.T) {
	inst := testInstance("ov")
	acttest.SquatAs(t, 0, "", inst)
	acttest.RemoveLockFile(t, LockPath, 0, inst)
	if uid, found, err := abstractOwner("sanqos-instance-" + inst); err != nil || !found || uid != 0 {
		t.Fatalf("abstractOwner: uid %d, found %v, %v; want root's socket", uid, found, err)
	}
	lk, err := LockInstance(0, inst)
	if !errors.Is(err, ErrInstanceRunning) || !strings.Contains(err.Error(), "earlier version") {
		lk.Release()
		t.Fatalf("lock with an older sanqos holding the abstract name: %v, want ErrInstanceRunning naming it", err)
	}
	if lk, dead := TryLockDead(0, inst); dead {
		lk.Release()
		t.Fatal("a clean-up took the lock of a live older instance")
	}
}

// testInstance is an instance name no other test process uses at once.
func testInstance(tag string) string {
	return fmt.Sprintf("%s%06d", tag, os.Getpid()%1000000)
}
