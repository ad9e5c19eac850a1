// Package mountinfo reads the kernel's table of mounts, /proc/<pid>/mountinfo
// (proc(5)). Topology uses it to find the device that holds a LUN's backing
// file; the emulated disk uses it to recognise its own (possibly stale) FUSE
// mounts. One parser keeps the escape handling and the optional-field rule in
// one place.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Self is the mount table of the calling process's mount namespace.
const Self = "/proc/self/mountinfo"

// Mount is one line of mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	ID PA MAJ:MIN ROOT POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPEROPTIONS
type Mount struct {
	ID, Parent   int
	Major, Minor int    // device numbers; major 0 is an anonymous device (FUSE, tmpfs, overlay)
	Root         string // path inside the file system that is mounted, unescaped
	Point        string // mount point, unescaped
	Options      string // per-mount options
	FSType       string // e.g. "ext4", "fuse.sanqos-diskemu"
	Source       string // e.g. "/dev/sda1", "none"
	SuperOptions string // per-superblock options; "" if the line has none
}

// Dev returns the device numbers as "major:minor", the form mountinfo and
// /sys/dev/block use.
func (m Mount) Dev() string { return strconv.Itoa(m.Major) + ":" + strconv.Itoa(m.Minor) }

// Read parses the mountinfo file at path (normally Self). The whole file is
// read at once: a pseudo-file's stat size says nothing about its length.
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading mounts: %w", err)
	}
	defer f.Close()
	ms, err := Parse(f, path)
	if err != nil {
		return nil, err
	}
	return ms, nil
}

// Parse parses mountinfo text. name is used in error messages (normally the
// path). Blank lines are skipped; any other line that is not a mount is an
// error naming its line number, since the kernel writes none.
func Parse(r io.Reader, name string) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	// A line holds options that can run to several kB (overlay lowerdirs);
	// 1 MiB is far beyond any seen and still bounds a corrupt input.
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", name, n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	return out, nil
}

func parseLine(line string) (Mount, error) {
	f := strings.Fields(line)
	// Six fixed fields come before the optional ones, so the "-" that ends
	// those can be found no earlier than index 6; an unescaped "-" mount
	// point (field 4) is then never taken for it.
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+2 >= len(f) {
		return Mount{}, fmt.Errorf(`expected "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE OPTS", got %q`, line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return Mount{}, fmt.Errorf("expected numeric mount ids in fields 1 and 2, got %q", line)
	}
	// Device numbers are unsigned: ParseUint refuses a sign that Atoi
	// would take ("-1:0", found by FuzzParse).
	maj, min, ok := strings.Cut(f[2], ":")
	ma, err1 := strconv.ParseUint(maj, 10, 31)
	mi, err2 := strconv.ParseUint(min, 10, 31)
	if !ok || err1 != nil || err2 != nil {
		return Mount{}, fmt.Errorf("expected MAJ:MIN in field 3, got %q", f[2])
	}
	m := Mount{
		ID: id, Parent: parent, Major: int(ma), Minor: int(mi),
		Root: Unescape(f[3]), Point: Unescape(f[4]), Options: f[5],
		FSType: f[sep+1], Source: Unescape(f[sep+2]),
	}
	if sep+3 < len(f) {
		m.SuperOptions = f[sep+3]
	}
	return m, nil
}

// Unescape undoes the kernel's octal escapes of space, tab, newline and
// backslash (\040, \011, \012, \134) in paths. A backslash not followed by
// three octal digits is kept as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
