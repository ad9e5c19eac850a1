package mountinfo

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// testdata/self is a capture of a lab machine (testdata/capture.sh): the
// root on a virtio disk, network namespace bind mounts and the emulated
// disk's FUSE mount.
func TestReadCapture(t *testing.T) {
	ms, err := Read("testdata/self")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("testdata/self")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Count(string(b), "\n"); len(ms) != want {
		t.Fatalf("got %d mounts, want one per line (%d)", len(ms), want)
	}
	root := Mount{ID: 27, Parent: 1, Major: 254, Minor: 0, Root: "/", Point: "/",
		Options: "rw,relatime", FSType: "ext4", Source: "/dev/vda",
		SuperOptions: "rw,discard,resv_strict,resuid=65534,resgid=65534"}
	var sawRoot, sawFUSE bool
	for _, m := range ms {
		switch {
		case m.Point == "/":
			sawRoot = true
			if m != root {
				t.Errorf("root mount = %+v, want %+v", m, root)
			}
		case m.FSType == "fuse.sanqos-diskemu":
			sawFUSE = true
			if m.Major != 0 || m.Dev() != "0:"+strconv.Itoa(m.Minor) || m.Source != "sanqos-diskemu" {
				t.Errorf("FUSE mount = %+v: want an anonymous device and source sanqos-diskemu", m)
			}
		}
	}
	if !sawRoot || !sawFUSE {
		t.Errorf("capture parsed without the root (%v) or the FUSE mount (%v)", sawRoot, sawFUSE)
	}
}

func TestParseLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Mount
	}{
		{"empty", "", nil},
		{"blank lines", "\n  \n", nil},
		{"no optional fields",
			"22 27 0:21 / /proc rw,relatime - proc proc rw\n",
			[]Mount{{ID: 22, Parent: 27, Major: 0, Minor: 21, Root: "/", Point: "/proc", Options: "rw,relatime", FSType: "proc", Source: "proc", SuperOptions: "rw"}}},
		{"optional fields and escapes",
			"611 29 0:77 /a\\040b /tmp/x/mnt\\040with\\040space rw shared:300 master:1 - fuse.sanqos-diskemu my\\011src rw,max_read=1048576",
			[]Mount{{ID: 611, Parent: 29, Major: 0, Minor: 77, Root: "/a b", Point: "/tmp/x/mnt with space", Options: "rw", FSType: "fuse.sanqos-diskemu", Source: "my\tsrc", SuperOptions: "rw,max_read=1048576"}}},
		{"mount point named -",
			"41 28 8:2 / - rw - xfs /dev/sda2 rw\n",
			[]Mount{{ID: 41, Parent: 28, Major: 8, Minor: 2, Root: "/", Point: "-", Options: "rw", FSType: "xfs", Source: "/dev/sda2", SuperOptions: "rw"}}},
		{"no super options",
			"41 28 8:2 / /srv rw - xfs /dev/sda2\n",
			[]Mount{{ID: 41, Parent: 28, Major: 8, Minor: 2, Root: "/", Point: "/srv", Options: "rw", FSType: "xfs", Source: "/dev/sda2"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in), "mi")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("mount %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseMalformed(t *testing.T) {
	for _, in := range []string{
		"28 1 8:1 / / rw,relatime shared:1 ext4 /dev/sda1 rw\n", // no separator
		"28 1 8:1 / / rw - ext4\n",                              // no source
		"28 1 x:1 / / rw - ext4 /dev/sda1 rw\n",
		"28 1 81 / / rw - ext4 /dev/sda1 rw\n",
		"a 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
		"28 1\n",
		"garbage line\n",
	} {
		_, err := Parse(strings.NewReader("22 28 0:21 / /sys rw - sysfs sysfs rw\n"+in), "mi")
		if err == nil || !strings.Contains(err.Error(), "mi line 2") {
			t.Errorf("Parse(%q) error = %v, want one naming line 2", in, err)
		}
	}
}

func TestReadMissing(t *testing.T) {
	if _, err := Read("testdata/nosuch"); err == nil || !strings.Contains(err.Error(), "testdata/nosuch") {
		t.Errorf("Read of a missing file: error %v, want one naming the path", err)
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		``:              "",
		`/a/b`:          "/a/b",
		`/a\040b`:       "/a b",
		`\040`:          " ",
		`/tab\011x\134`: "/tab\tx\\",
		`/nl\012`:       "/nl\n",
		`/short\04`:     `/short\04`, // truncated escape kept as is
		`/bad\09x`:      `/bad\09x`,  // 9 is not octal
		`/big\777`:      `/big\777`,  // over a byte
		`/end\`:         `/end\`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
