package diskemu

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFileOperations drives every operation the lab uses through the mount
// and checks the data against the backing files.
func TestFileOperations(t *testing.T) {
	s := mountT(t, Options{Profile: "ram", StatsInterval: 50 * time.Millisecond})
	mnt, back := s.Mountpoint(), s.opts.BackingDir

	// A sparse 1 GiB image: truncate must not allocate.
	img := filepath.Join(mnt, "lun-b2.img")
	makeImage(t, img, 1<<30)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(back, "lun-b2.img"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 1<<30 || st.Blocks*512 > 1<<20 {
		t.Fatalf("backing image: size %d, %d bytes allocated; want 1 GiB, sparse", st.Size, st.Blocks*512)
	}

	// Writes at scattered offsets read back identically, through the mount
	// and in the backing file.
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	type chunk struct {
		off  int64
		data []byte
	}
	var chunks []chunk
	for i := 0; i < 20; i++ {
		c := chunk{off: int64(i)*(50<<20) + rng.Int63n(1<<20), data: make([]byte, 1+rng.Intn(300<<10))}
		rng.Read(c.data)
		if _, err := f.WriteAt(c.data, c.off); err != nil {
			t.Fatalf("write at %d: %v", c.off, err)
		}
		chunks = append(chunks, c)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	for _, c := range chunks {
		got := make([]byte, len(c.data))
		if _, err := f.ReadAt(got, c.off); err != nil {
			t.Fatalf("read at %d: %v", c.off, err)
		}
		if !bytes.Equal(got, c.data) {
			t.Fatalf("data read back at %d differs", c.off)
		}
	}
	// fallocate through the mount allocates in the backing file.
	if err := unix.Fallocate(int(f.Fd()), 0, 900<<20, 8<<20); err != nil {
		t.Fatalf("fallocate: %v", err)
	}
	var st2 unix.Stat_t
	unix.Stat(filepath.Join(back, "lun-b2.img"), &st2)
	if st2.Blocks*512 < 8<<20 {
		t.Errorf("fallocate of 8 MiB left %d bytes allocated", st2.Blocks*512)
	}
	// Growing and shrinking by truncate is seen through the mount.
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	if fi, _ := f.Stat(); fi.Size() != 2<<30 {
		t.Errorf("size after truncate: %d", fi.Size())
	}
	f.Close()

	// Readdir lists images but not the server's dot files; dot names are
	// refused.
	makeImage(t, filepath.Join(mnt, "lun-b3.img"), 1<<20)
	if _, err := os.Create(filepath.Join(mnt, ".hidden")); !errors.Is(err, os.ErrPermission) {
		t.Errorf("creating a dot file: %v, want permission denied", err)
	}
	waitFor(t, func() bool { _, err := os.Stat(s.opts.StatsPath); return err == nil })
	names := readdir(t, mnt)
	if want := []string{"lun-b2.img", "lun-b3.img"}; !equal(names, want) {
		t.Errorf("readdir %v, want %v", names, want)
	}
	// Each file has its own region.
	stats := s.Stats()
	regions := map[int64]bool{}
	for _, fs := range stats.Files {
		regions[fs.RegionOffset] = true
	}
	if len(regions) != 2 {
		t.Errorf("files share regions: %+v", stats.Files)
	}
	if err := os.Remove(filepath.Join(mnt, "lun-b3.img")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(back, "lun-b3.img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unlink left the backing file: %v", err)
	}

	// Counters: 20 writes, 20 reads at least, and the JSON file agrees
	// with Stats once rewritten.
	if stats.Writes < 20 || stats.Reads < 20 || stats.Fsyncs < 1 || stats.InFlight != 0 {
		t.Errorf("stats %+v: want >=20 writes and reads, >=1 fsync, nothing in flight", stats.IOStats)
	}
	var fromFile Stats
	waitFor(t, func() bool {
		b, err := os.ReadFile(s.opts.StatsPath)
		return err == nil && json.Unmarshal(b, &fromFile) == nil && fromFile.Writes == s.Stats().Writes && fromFile.Reads == s.Stats().Reads
	})
	if fromFile.Profile != "ram" || len(fromFile.Files) == 0 {
		t.Errorf("stats file: %+v", fromFile)
	}

	// Data is durable in the backing directory after unmount.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	bf, err := os.Open(filepath.Join(back, "lun-b2.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	for _, c := range chunks {
		got := make([]byte, len(c.data))
		if _, err := bf.ReadAt(got, c.off); err != nil || !bytes.Equal(got, c.data) {
			t.Fatalf("backing file differs at %d after unmount (%v)", c.off, err)
		}
	}
}

// TestStaleMount: a server that died leaves a mount that answers ENOTCONN;
// the next Mount at the same path detaches it and serves the same images.
func TestStaleMount(t *testing.T) {
	needFUSE(t)
	d := testDir(t)
	o := Options{Mountpoint: filepath.Join(d, "mnt"), BackingDir: filepath.Join(d, "b"), Profile: "ram"}
	first, err := Mount(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.Mountpoint, "img"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Kill the connection as a crash would, through a private fusectl
	// mount (the system may not have /sys/fs/fuse/connections mounted).
	ctl := filepath.Join(d, "fusectl")
	os.Mkdir(ctl, 0o755)
	if err := unix.Mount("sanqos-emu-fusectl", ctl, "fusectl", 0, ""); err != nil {
		t.Skipf("cannot mount fusectl: %v", err)
	}
	defer unix.Unmount(ctl, unix.MNT_DETACH)
	abort := filepath.Join(ctl, first.mount.dev[strings.Index(first.mount.dev, ":")+1:], "abort")
	if err := os.WriteFile(abort, []byte("1"), 0); err != nil {
		t.Fatalf("aborting the fuse connection: %v", err)
	}
	if _, err := os.Stat(filepath.Join(o.Mountpoint, "img")); !errors.Is(err, unix.ENOTCONN) {
		t.Fatalf("after abort, stat: %v, want ENOTCONN", err)
	}
	second, err := Mount(o)
	if err != nil {
		t.Fatalf("mount over a stale mount: %v", err)
	}
	defer second.Close()
	if b, err := os.ReadFile(filepath.Join(o.Mountpoint, "img")); err != nil || string(b) != "kept" {
		t.Fatalf("after remount: %q, %v", b, err)
	}
	// The dead server's Close must not unmount the new one.
	if err := first.Close(); err != nil {
		t.Errorf("closing the dead server: %v", err)
	}
	if _, err := os.ReadFile(filepath.Join(o.Mountpoint, "img")); err != nil {
		t.Fatalf("the new mount went away with the old server: %v", err)
	}
}

// TestRefusesForeignMount: a mountpoint holding somebody else's mount is an
// error, and that mount is left alone.
func TestRefusesForeignMount(t *testing.T) {
	needFUSE(t)
	d := testDir(t)
	mp := filepath.Join(d, "mnt")
	os.Mkdir(mp, 0o755)
	if err := unix.Mount("sanqos-emu-test", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	defer unix.Unmount(mp, unix.MNT_DETACH)
	os.WriteFile(filepath.Join(mp, "theirs"), nil, 0o644)
	_, err := Mount(Options{Mountpoint: mp, BackingDir: filepath.Join(d, "b"), Profile: "ram"})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("tmpfs")) {
		t.Fatalf("Mount over tmpfs: %v, want an error naming tmpfs", err)
	}
	if _, err := os.Stat(filepath.Join(mp, "theirs")); err != nil {
		t.Errorf("the foreign mount was disturbed: %v", err)
	}
}

func readdir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}
