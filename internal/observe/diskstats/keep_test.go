package diskstats

import (
	"os"
	"path/filepath"
	"testing"
)

// Finding 2 of issue 14: the file was opened anew every tick, so a daemon
// whose descriptors were exhausted lost its measurements and released all
// throttling. It is now opened once and re-read from offset 0: the test
// removes the file after the first read, and the second read must still
// work.
func TestFSKeepsTheFileOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "diskstats")
	if err := os.WriteFile(p, []byte("   7 1 loop1 1 2 3 4 5 6 7 8 9 10 11\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := NewFS(dir)
	defer fs.Close()
	if s, _, err := fs.Read(); err != nil || len(s) != 1 {
		t.Fatalf("first read: %v, %v", s, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if s, _, err := fs.Read(); err != nil || len(s) != 1 || s[0].ReadIOs != 1 {
			t.Fatalf("read %d after the file was removed: %v, %v", i+2, s, err)
		}
	}
}

func TestFSLiveProcReread(t *testing.T) {
	if _, err := os.Stat("/proc/diskstats"); err != nil {
		t.Skip("no /proc/diskstats here")
	}
	fs := NewFS("/proc")
	defer fs.Close()
	a, _, err := fs.Read()
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := fs.Read()
	if err != nil || len(b) != len(a) {
		t.Fatalf("second read of a kept /proc/diskstats: %d devices, %v; first %d", len(b), err, len(a))
	}
}
