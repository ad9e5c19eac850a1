package diskemu

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/observe/mountinfo"
	"golang.org/x/sys/unix"
)

// testPrefix names every temporary directory (and so every mount and loop
// device backing file) the tests create; leftovers with it are ours.
const testPrefix = "sanqos-emu-"

var cleanOnce sync.Once

// needFUSE skips unless we are root with /dev/fuse, and removes what a
// crashed earlier run of these tests left behind.
func needFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount FUSE and attach loop devices")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	cleanOnce.Do(func() { cleanLeftovers(t) })
}

// cleanLeftovers detaches loop devices, unmounts and removes directories
// under os.TempDir()/sanqos-emu-*, and nothing else.
func cleanLeftovers(t testing.TB) {
	root := filepath.Join(os.TempDir(), testPrefix)
	if loops, err := filepath.Glob("/sys/block/loop*/loop/backing_file"); err == nil {
		for _, bf := range loops {
			b, err := os.ReadFile(bf)
			if err != nil || !strings.HasPrefix(strings.TrimSpace(string(b)), root) {
				continue
			}
			dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(bf)))
			t.Logf("detaching leftover %s (%s)", dev, strings.TrimSpace(string(b)))
			exec.Command("losetup", "-d", dev).Run()
		}
	}
	if ms, err := mountinfo.Read(mountinfo.Self); err == nil {
		for i := len(ms) - 1; i >= 0; i-- {
			if strings.HasPrefix(ms[i].Point, root) {
				t.Logf("unmounting leftover %s", ms[i].Point)
				unix.Unmount(ms[i].Point, unix.MNT_DETACH)
			}
		}
	}
	dirs, _ := filepath.Glob(root + "*")
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// testDir is a fresh sanqos-emu- directory removed at the end of the test.
func testDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", testPrefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// mountT mounts an emulated disk for the test and unmounts it at the end.
func mountT(t testing.TB, o Options) *Server {
	t.Helper()
	needFUSE(t)
	d := testDir(t)
	if o.Mountpoint == "" {
		o.Mountpoint = filepath.Join(d, "mnt")
	}
	if o.BackingDir == "" {
		o.BackingDir = filepath.Join(d, "backing")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := Mount(o)
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// loopAttach attaches file to a loop device with direct I/O and detaches
// it at the end of the test. It returns the device name ("loop3").
func loopAttach(t testing.TB, file string) string {
	t.Helper()
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	out, err := exec.Command("losetup", "--direct-io=on", "-f", "--show", file).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --direct-io=on %s: %v: %s", file, err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		for i := 0; i < 50; i++ {
			if err := exec.Command("losetup", "-d", dev).Run(); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		// losetup -d only marks the device for autoclear; wait until the
		// kernel has let go of the image so the unmount is not busy.
		bf := filepath.Join("/sys/block", filepath.Base(dev), "loop/backing_file")
		for i := 0; i < 50; i++ {
			if _, err := os.Stat(bf); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return filepath.Base(dev)
}

// diskstat returns reads completed and ms spent reading for a device.
func diskstat(t testing.TB, dev string) (reads, readMs uint64) {
	t.Helper()
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) >= 7 && f[2] == dev {
			reads, _ = strconv.ParseUint(f[3], 10, 64)
			readMs, _ = strconv.ParseUint(f[6], 10, 64)
			return reads, readMs
		}
	}
	t.Fatalf("%s not in /proc/diskstats", dev)
	return 0, 0
}

func makeImage(t testing.TB, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func fio(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("fio", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("fio %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mib(n int64) string { return fmt.Sprintf("%dMiB", n>>20) }
