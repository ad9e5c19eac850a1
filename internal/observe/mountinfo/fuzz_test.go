package mountinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: /proc/self/mountinfo is read at every discovery to resolve
// LUN backing files; any content must give mounts or an error, never a
// panic, and a mount point must never hold an unescaped octal sequence.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("testdata", "self")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"))
	f.Add([]byte("1 2 3:4 / /a\\040b rw - fuse.x src\\134 rw\n\n"))
	f.Add([]byte("1 2 3:4 / / rw shared:1 master:2 propagate_from:3 unbindable - t s o\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := Parse(bytes.NewReader(b), "fuzz")
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.Major < 0 || m.Minor < 0 {
				t.Fatalf("negative device %d:%d", m.Major, m.Minor)
			}
			_ = m.Dev()
			_ = strings.Contains(m.Point, "\\")
		}
	})
}

// FuzzUnescape: the kernel's octal escapes; never panics, and text without
// a backslash is returned unchanged.
func FuzzUnescape(f *testing.F) {
	f.Add(`/a\040b\011c\012d\134`)
	f.Add(`\`)
	f.Add(`\0`)
	f.Add(`\777`)
	f.Fuzz(func(t *testing.T, s string) {
		u := Unescape(s)
		if !strings.Contains(s, `\`) && u != s {
			t.Fatalf("Unescape(%q) = %q, want it unchanged", s, u)
		}
		if len(u) > len(s) {
			t.Fatalf("Unescape(%q) = %q grew", s, u)
		}
	})
}
