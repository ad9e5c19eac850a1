package journal

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPriority(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  int
	}{
		{slog.LevelError, 3},
		{slog.LevelError + 4, 3},
		{slog.LevelWarn, 4},
		{slog.LevelWarn + 1, 4},
		{slog.LevelInfo, 6},
		{slog.LevelInfo + 2, 6},
		{slog.LevelDebug, 7},
		{slog.LevelDebug - 4, 7},
	} {
		if got := Priority(tc.level); got != tc.want {
			t.Errorf("Priority(%v) = %d, want %d", tc.level, got, tc.want)
		}
	}
}

// TestPriorityHandler: each line carries its own level's prefix, also
// through loggers derived with attributes and groups, and the rest of the
// line is what the text handler writes.
func TestPriorityHandler(t *testing.T) {
	var buf bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: dropTime}
	log := slog.New(NewPriorityHandler(&buf, opts))
	log.Error("e", "k", 1)
	log.Warn("w")
	log.With("a", "b").Info("i")
	log.WithGroup("g").Debug("d", "k", "v")
	want := strings.Join([]string{
		`<3>level=ERROR msg=e k=1`,
		`<4>level=WARN msg=w`,
		`<6>level=INFO msg=i a=b`,
		`<7>level=DEBUG msg=d g.k=v`,
		``,
	}, "\n")
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// TestConnected: only the stream whose device and inode JOURNAL_STREAM
// names counts as the journal.
func TestConnected(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other, err := os.Create(filepath.Join(dir, "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	match := fmt.Sprintf("%d:%d", uint64(st.Dev), uint64(st.Ino))
	for _, tc := range []struct {
		name   string
		f      *os.File
		stream string
		want   bool
	}{
		{"matching dev:ino", f, match, true},
		{"another file", other, match, false},
		{"unset", f, "", false},
		{"no colon", f, "12345", false},
		{"not numbers", f, "a:b", false},
		{"other inode", f, fmt.Sprintf("%d:%d", uint64(st.Dev), uint64(st.Ino)+1), false},
		{"nil file", nil, match, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Connected(tc.f, tc.stream); got != tc.want {
				t.Errorf("Connected(%q) = %v, want %v", tc.stream, got, tc.want)
			}
		})
	}
}

// TestNewHandler: the prefix appears only when the writer is the journal's
// stream; a buffer or an unmatched file gets slog's plain text.
func TestNewHandler(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stream"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	opts := &slog.HandlerOptions{ReplaceAttr: dropTime}
	for _, tc := range []struct {
		name   string
		stream string
		want   string
	}{
		{"journal", fmt.Sprintf("%d:%d", uint64(st.Dev), uint64(st.Ino)), "<4>level=WARN msg=w\n"},
		{"elsewhere", "1:1", "level=WARN msg=w\n"},
		{"no journal", "", "level=WARN msg=w\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("JOURNAL_STREAM", tc.stream)
			if err := f.Truncate(0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			slog.New(NewHandler(f, opts)).Warn("w")
			got, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	var buf bytes.Buffer
	t.Setenv("JOURNAL_STREAM", "1:1")
	slog.New(NewHandler(&buf, opts)).Warn("w")
	if buf.String() != "level=WARN msg=w\n" {
		t.Errorf("a buffer got %q", buf.String())
	}
}
