package diskstats

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseInFlight(t *testing.T) {
	for _, tc := range []struct {
		in            string
		reads, writes uint64
		ok            bool
	}{
		{"       1        0\n", 1, 0, true},
		{"0 12", 0, 12, true},
		{"", 0, 0, false},
		{"1\n", 0, 0, false},
		{"1 2 3\n", 0, 0, false},
		{"x 2\n", 0, 0, false},
		{"1 -2\n", 0, 0, false},
	} {
		r, w, err := parseInFlight([]byte(tc.in))
		if (err == nil) != tc.ok || r != tc.reads || w != tc.writes {
			t.Errorf("parseInFlight(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, r, w, err, tc.reads, tc.writes, tc.ok)
		}
	}
}

func writeInFlight(t *testing.T, root, dev, text string) {
	t.Helper()
	dir := filepath.Join(root, "class", "block", dev)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "inflight"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The file is kept open and re-read in place: a new value is seen without
// reopening, a vanished device says so and is reopened when it is back.
func TestInFlightRereadsInPlace(t *testing.T) {
	root := t.TempDir()
	writeInFlight(t, root, "loop3", "       2        5\n")
	writeInFlight(t, root, "cciss!c0d0", "0 0\n")
	f := NewInFlight(root)
	defer f.Close()
	if n, ok := f.ReadsInFlight("loop3"); !ok || n != 2 {
		t.Fatalf("loop3 = %d, %v; want 2", n, ok)
	}
	// Rewrite the same inode, as sysfs regenerates the text on each read.
	p := filepath.Join(root, "class", "block", "loop3", "inflight")
	if err := os.WriteFile(p, []byte("       7        0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, ok := f.ReadsInFlight("loop3"); !ok || n != 7 {
		t.Fatalf("loop3 after change = %d, %v; want 7", n, ok)
	}
	if len(f.files) != 1 {
		t.Errorf("%d files open, want 1 (kept open between reads)", len(f.files))
	}
	if _, ok := f.ReadsInFlight("cciss/c0d0"); !ok {
		t.Error("a device with a slash in its name is not found under its sysfs name with '!'")
	}
	if _, ok := f.ReadsInFlight("nosuch"); ok {
		t.Error("a missing device reads as ok")
	}
	writeInFlight(t, root, "loop3", "garbage\n")
	if _, ok := f.ReadsInFlight("loop3"); ok {
		t.Error("an unparsable inflight file reads as ok")
	}
	if _, ok := f.files["loop3"]; ok {
		t.Error("an unparsable file is kept open; it should be reopened next time")
	}
}

// On the real sysfs, a kept-open inflight file re-reads at offset 0.
func TestInFlightLiveSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/class/block"); err != nil {
		t.Skip("no /sys/class/block here")
	}
	ents, err := os.ReadDir("/sys/class/block")
	if err != nil || len(ents) == 0 {
		t.Skip("no block devices in /sys/class/block")
	}
	f := NewInFlight("/sys")
	defer f.Close()
	dev := ents[0].Name()
	for i := range 3 {
		if _, _, err := f.Read(dev); err != nil {
			t.Fatalf("read %d of %s: %v", i, dev, err)
		}
	}
}

// The snapshot answers from the sample, not from sysfs: a change after
// Sample is seen only at the next Sample, and an idle device costs no
// read (it is not even there to read).
func TestInFlightSnapshotAnswersFromTheSample(t *testing.T) {
	root := t.TempDir()
	writeInFlight(t, root, "loop3", "3 1\n")
	s := NewInFlightSnapshot(NewInFlight(root))
	defer s.Close()
	snap := []Stat{{Device: "loop3", InProgress: 4}, {Device: "idle0"}, {Device: "gone1", InProgress: 2}}
	s.Sample(snap)
	writeInFlight(t, root, "loop3", "9 0\n")
	for _, tc := range []struct {
		dev string
		n   uint64
		ok  bool
	}{{"loop3", 3, true}, {"idle0", 0, true}, {"gone1", 0, false}, {"other", 0, false}} {
		if n, ok := s.ReadsInFlight(tc.dev); n != tc.n || ok != tc.ok {
			t.Errorf("%s = %d, %v; want %d, %v", tc.dev, n, ok, tc.n, tc.ok)
		}
	}
	s.Sample(snap)
	if n, _ := s.ReadsInFlight("loop3"); n != 9 {
		t.Errorf("loop3 after a new Sample = %d, want 9", n)
	}
}
