package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Finding 10 of issue 14: the record grew without bound. With the cap it
// holds at most two files of at most max bytes, each of whole lines.
func TestRecordFileRotates(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rec.jsonl")
	r, err := CreateRecordFile(p, 1000)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(`{"t":"` + strings.Repeat("x", 90) + `"}` + "\n") // 99 bytes
	for range 1000 {
		if _, err := r.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	total := int64(0)
	for _, f := range []string{p, p + ".1"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1000 {
			t.Errorf("%s holds %d bytes, cap 1000", f, len(b))
		}
		if len(b)%len(line) != 0 || !bytes.HasSuffix(b, []byte("\n")) {
			t.Errorf("%s is not whole lines (%d bytes)", f, len(b))
		}
		total += int64(len(b))
	}
	if total > 2000 || total < 1000 {
		t.Errorf("record takes %d bytes after 99 kB written, want between 1000 and 2000", total)
	}
	if _, err := os.Stat(p + ".2"); err == nil {
		t.Error("a third file exists")
	}
}

// Audit round 2, N10: the record was opened with os.Create, which
// follows a symlink (or a hard link) placed at its path and truncates
// the file it points to as root, and made the record 0644. Now such a
// path is refused before anything is truncated, and the record is 0640.
func TestRecordFileRefusesLinksAndIsPrivate(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sym := filepath.Join(dir, "sym.jsonl")
	if err := os.Symlink(victim, sym); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "hard.jsonl")
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sym, hard} {
		if r, err := CreateRecordFile(p, 1<<20); err == nil || !strings.Contains(err.Error(), "remove it") {
			if r != nil {
				r.Close()
			}
			t.Errorf("record at %s: %v, want a refusal that says to remove it", filepath.Base(p), err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the linked file now holds %q: the record truncated it", b)
	}

	p := filepath.Join(dir, "rec.jsonl")
	r, err := CreateRecordFile(p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	old := filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(old, []byte("an earlier run\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(old, 0o666)
	r, err = CreateRecordFile(old, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	for _, f := range []string{p, old} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&^0o640 != 0 {
			t.Errorf("%s has mode %04o, want at most 0640 (it names clients)", filepath.Base(f), fi.Mode().Perm())
		}
		if fi.Size() != 0 {
			t.Errorf("%s was not emptied", filepath.Base(f))
		}
	}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(dir, "theirs.jsonl")
		if err := os.WriteFile(theirs, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if r, err := CreateRecordFile(theirs, 1<<20); err == nil {
			r.Close()
			t.Error("a record file of uid 65534 was used: its owner could read what root writes")
		}
	}
}
