package discover

import (
	"context"
	"errors"
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

var updateFixtures = flag.Bool("update-fixtures", false, "recapture testdata/tgt from a real tgtd (root, tgt and libiscsi-bin installed)")

// fileRunner replays a captured tgtadm output and records the arguments.
type fileRunner struct {
	path string
	args []string
	err  error
}

func (f *fileRunner) Run(_ context.Context, args ...string) ([]byte, error) {
	f.args = args
	if f.err != nil {
		return nil, f.err
	}
	return os.ReadFile(f.path)
}

func TestUpdateTgtFixtures(t *testing.T) {
	if !*updateFixtures {
		t.Skip("run with -update-fixtures to recapture testdata/tgt")
	}
	if os.Geteuid() != 0 {
		t.Skip("recapturing needs root (network namespaces, tgtd)")
	}
	for _, bin := range []string{"tgtd", "tgtadm", "iscsi-perf"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("recapturing needs %s (Debian packages tgt, libiscsi-bin)", bin)
		}
	}
	out, err := exec.Command("testdata/tgt/capture.sh", "testdata/tgt").CombinedOutput()
	if err != nil {
		t.Fatalf("capture.sh: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestParseTgtShowFixture(t *testing.T) {
	b, err := os.ReadFile("testdata/tgt/show-target.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseTgtShow(b)
	if err != nil {
		t.Fatal(err)
	}
	a1 := netip.MustParseAddr("10.206.1.2")
	b2 := netip.MustParseAddr("10.206.2.2")
	ctl := func(id int) TgtLUN { return TgtLUN{LUN: id, Type: "controller", BackingType: "null"} }
	want := []TgtTarget{
		{TID: 1, Name: "iqn.2026-11.org.sanqos:two-luns", State: "ready",
			Nexus: []TgtNexus{{ID: 1, Initiator: "iqn.2026-11.org.sanqos:init-a", Addrs: []netip.Addr{a1}}},
			LUNs: []TgtLUN{ctl(0),
				{LUN: 1, Type: "disk", BackingType: "rdwr", BackingPath: "/srv/sanqos/lun-a1.img"},
				{LUN: 2, Type: "disk", BackingType: "aio", BackingPath: "/srv/sanqos/lun-a2.img"}},
			ACLs: []string{"ALL"}},
		{TID: 2, Name: "iqn.2026-11.org.sanqos:idle", State: "ready",
			LUNs: []TgtLUN{ctl(0), {LUN: 1, Type: "disk", BackingType: "rdwr", BackingPath: "/srv/sanqos/lun-idle.img"}},
			ACLs: []string{"10.206.1.2"}},
		{TID: 3, Name: "iqn.2026-11.org.sanqos:shared", State: "ready",
			Nexus: []TgtNexus{
				{ID: 2, Initiator: "iqn.2026-11.org.sanqos:init-a", Addrs: []netip.Addr{a1}},
				{ID: 3, Initiator: "iqn.2026-11.org.sanqos:init-b", Addrs: []netip.Addr{b2}},
				{ID: 4, Initiator: "iqn.2026-11.org.sanqos:init-b2", Addrs: []netip.Addr{b2}}},
			LUNs: []TgtLUN{ctl(0), {LUN: 1, Type: "disk", BackingType: "rdwr", BackingPath: "/srv/sanqos/lun-shared.img"}},
			ACLs: []string{"ALL"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseTgtShow =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseTgtShowEdges(t *testing.T) {
	tests := []struct {
		name, in string
		targets  int
		errLine  string // "" = success
	}{
		{"empty", "", 0, ""},
		{"blank lines only", "\n\n", 0, ""},
		{"no target header", "    System information:\n", 0, "line 1"},
		{"bad tid", "Target x: iqn.a\n", 0, "line 1"},
		{"bad nexus id", "Target 1: iqn.a\n    I_T nexus information:\n        I_T nexus: one\n", 0, "line 3"},
		{"bad address", "Target 1: iqn.a\n    I_T nexus information:\n        I_T nexus: 1\n            IP Address: 10.0.0.300\n", 0, "line 4"},
		{"address before nexus", "Target 1: iqn.a\n    I_T nexus information:\n                IP Address: 10.0.0.3\n", 0, "line 3"},
		{"unknown nexus line", "Target 1: iqn.a\n    I_T nexus information:\n        Flux: 3\n", 0, "line 3"},
		{"lun field before LUN", "Target 1: iqn.a\n    LUN information:\n        Type: disk\n", 0, "line 3"},
		{"unknown section", "Target 1: iqn.a\n    Frobnication:\n", 0, "line 2"},
		{"ipv6 and unknown lun field", "Target 1: iqn.a\n    I_T nexus information:\n        I_T nexus: 1\n            Initiator: iqn.b alias: x\n            Connection: 0\n                IP Address: fd00::2\n    LUN information:\n        LUN: 1\n            Future field: 7\n            Backing store path: /dev/sdb\n", 1, ""},
	}
	for _, tt := range tests {
		got, err := ParseTgtShow([]byte(tt.in))
		if tt.errLine == "" {
			if err != nil || len(got) != tt.targets {
				t.Errorf("%s: got %d targets, err %v; want %d, nil", tt.name, len(got), err, tt.targets)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.errLine) || !strings.Contains(err.Error(), "expected") {
			t.Errorf("%s: err = %v, want one naming %q and what was expected", tt.name, err, tt.errLine)
		}
	}
}

func TestTgtAttachments(t *testing.T) {
	r := &fileRunner{path: "testdata/tgt/show-target.txt"}
	atts, err := NewTgt(r, 2603).Attachments(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"-C", "2603", "--lld", "iscsi", "--mode", "target", "--op", "show"}; !reflect.DeepEqual(r.args, want) {
		t.Errorf("tgtadm args = %v, want %v", r.args, want)
	}
	var got []string
	for _, a := range atts {
		got = append(got, a.Addr.String()+" "+a.IQN+" "+a.Backing)
	}
	want := []string{
		"10.206.1.2 iqn.2026-11.org.sanqos:init-a /srv/sanqos/lun-a1.img",
		"10.206.1.2 iqn.2026-11.org.sanqos:init-a /srv/sanqos/lun-a2.img",
		"10.206.1.2 iqn.2026-11.org.sanqos:init-a /srv/sanqos/lun-shared.img",
		"10.206.2.2 iqn.2026-11.org.sanqos:init-b /srv/sanqos/lun-shared.img",
		"10.206.2.2 iqn.2026-11.org.sanqos:init-b2 /srv/sanqos/lun-shared.img",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("attachments =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	fail := &fileRunner{err: errors.New("tgtd not running")}
	if _, err := NewTgt(fail, 0).Attachments(context.Background()); err == nil {
		t.Error("a failing tgtadm gave no error")
	}
	if fail.args[0] != "--lld" {
		t.Errorf("port 0 should leave tgtadm's default: args %v", fail.args)
	}
}

func TestExecRunner(t *testing.T) {
	out, err := ExecRunner{Path: "echo"}.Run(context.Background(), "a", "b")
	if err != nil || string(out) != "a b\n" {
		t.Errorf("echo: %q, %v", out, err)
	}
	_, err = ExecRunner{Path: "sh"}.Run(context.Background(), "-c", "echo oops >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "oops") {
		t.Errorf("failing command: err = %v, want stderr quoted", err)
	}
	_, err = ExecRunner{Path: "sleep", Timeout: 50 * time.Millisecond}.Run(context.Background(), "5")
	if err == nil {
		t.Error("timeout did not stop a hung command")
	}
}
