package lab

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Finding 10 of issue 14: the lab opened /var/tmp/sanqos-lab/*.img as root
// without O_NOFOLLOW and truncated it: a link planted there by anyone
// would have truncated its target.
func TestCreateImageRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "sanqos-lab-b2.img")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := createImage(link, 1<<20); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("image path a symlink: %v, want a refusal naming the link", err)
	}
	hard := filepath.Join(dir, "sanqos-lab-b3.img")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	if err := createImage(hard, 1<<20); err == nil || !strings.Contains(err.Error(), "plain file") {
		t.Errorf("image path a hard link: %v, want a refusal", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target was changed: %q", b)
	}
	// A directory that is a link, or writable by others.
	other := filepath.Join(dir, "elsewhere")
	os.Mkdir(other, 0o755)
	linkDir := filepath.Join(dir, "data")
	os.Symlink(other, linkDir)
	if err := createImage(filepath.Join(linkDir, "x.img"), 1<<20); err == nil {
		t.Error("image directory a symlink: accepted")
	}
	open := filepath.Join(dir, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := createImage(filepath.Join(open, "x.img"), 1<<20); err == nil || !strings.Contains(err.Error(), "written by others") {
		t.Errorf("world-writable image directory: %v, want a refusal", err)
	}
	// The ordinary case still works, and keeps an existing image.
	good := filepath.Join(dir, "good", "sanqos-lab-b4.img")
	if err := createImage(good, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := createImage(good, 1<<20); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(good); fi.Size() != 1<<20 {
		t.Errorf("image size %d", fi.Size())
	}
}

// fakeProcs is a process table in which killed processes take exitAfter
// to go away, as tgtd does while it closes its loop devices.
type fakeProcs struct {
	now       time.Time
	killedAt  map[int]time.Time
	exitAfter time.Duration
	ignore    syscall.Signal // a signal the processes ignore
}

func (f *fakeProcs) ops() procOps {
	return procOps{
		kill: func(pid int, sig syscall.Signal) error {
			if sig != f.ignore {
				if _, ok := f.killedAt[pid]; !ok {
					f.killedAt[pid] = f.now
				}
			}
			return nil
		},
		gone: func(pid int) bool {
			at, ok := f.killedAt[pid]
			return ok && f.now.Sub(at) >= f.exitAfter
		},
		sleep: func(d time.Duration) { f.now = f.now.Add(d) },
		now:   func() time.Time { return f.now },
	}
}

// Finding 10: 'lab down' returned while tgtd was still exiting.
func TestStopAllWaitsUntilGone(t *testing.T) {
	f := &fakeProcs{now: time.Unix(0, 0), killedAt: map[int]time.Time{}, exitAfter: 3 * time.Second}
	start := f.now
	if err := f.ops().stopAll([]int{101, 102}, syscall.SIGKILL, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := f.now.Sub(start); took < 3*time.Second {
		t.Errorf("stopAll returned after %v, before the processes were gone (3 s)", took)
	}
	// One that never goes: an error, after a bound.
	f = &fakeProcs{now: time.Unix(0, 0), killedAt: map[int]time.Time{}, exitAfter: time.Hour, ignore: syscall.SIGTERM}
	if err := f.ops().stopAll([]int{103}, syscall.SIGTERM, time.Second); err == nil || !strings.Contains(err.Error(), "103") {
		t.Errorf("a process that does not exit: %v, want an error naming it", err)
	}
}
