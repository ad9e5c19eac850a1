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
