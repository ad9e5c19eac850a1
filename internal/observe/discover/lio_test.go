package discover

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLIOGroups(t *testing.T) {
	got, err := NewLIO("testdata/lio/target").Groups()
	if err != nil {
		t.Fatal(err)
	}
	want := []LIOGroup{
		{Target: "iqn.2003-01.org.linux-iscsi.sanqos.x8664:sn.aaaa", TPGT: "tpgt_1",
			Backings: []string{"/dev/mapper/data-lun1", "/srv/images/a.img"},
			Sessions: []LIOSession{{Initiator: "iqn.1994-05.com.redhat:host1", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}}}},
		{Target: "iqn.2003-01.org.linux-iscsi.sanqos.x8664:sn.cccc", TPGT: "tpgt_1",
			Backings: []string{"/dev/sde"},
			Sessions: []LIOSession{{Initiator: "iqn.1994-05.com.redhat:host3", Addrs: []netip.Addr{
				netip.MustParseAddr("192.0.2.13"), netip.MustParseAddr("2001:db8::13")}}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Groups =\n%+v\nwant\n%+v", got, want)
	}
	atts, err := NewLIO("testdata/lio/target").Attachments(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(atts) != 4 {
		t.Errorf("got %d attachments, want 4 (host1 x 2 LUNs, host3 x 2 addresses): %+v", len(atts), atts)
	}
}

func TestLIOErrors(t *testing.T) {
	_, err := NewLIO(t.TempDir()).Groups()
	if err == nil || !strings.Contains(err.Error(), "lio_root") {
		t.Errorf("missing configfs: err = %v, want a hint to set lio_root", err)
	}
	// A LUN whose storage object link dangles.
	root := t.TempDir()
	tpg := filepath.Join(root, "iscsi", "iqn.x", "tpgt_1")
	must(t, os.MkdirAll(filepath.Join(tpg, "lun", "lun_0"), 0o755))
	must(t, os.WriteFile(filepath.Join(tpg, "enable"), []byte("1\n"), 0o644))
	must(t, os.Symlink("../../../../../../target/core/iblock_0/gone", filepath.Join(tpg, "lun", "lun_0", "abc")))
	if _, err := NewLIO(root).Groups(); err == nil || !strings.Contains(err.Error(), "lun_0") {
		t.Errorf("dangling LUN link: err = %v, want one naming lun_0", err)
	}
}

func TestParseLIOInfo(t *testing.T) {
	tests := []struct {
		name, in string
		active   bool
		addrs    int
		bad      bool
	}{
		{"no session", "No active iSCSI Session for Initiator Endpoint: iqn.x\n", false, 0, false},
		{"empty", "", false, 0, false},
		{"one", "InitiatorName: iqn.x\n   Address 10.0.0.1 TCP  StatSN: 0x1\n", true, 1, false},
		{"bad address", "InitiatorName: iqn.x\n   Address 10.0.0.999 TCP  StatSN: 0x1\n", false, 0, true},
		{"session without connection", "InitiatorName: iqn.x\nSession State: TARG_SESS_STATE_FAILED\n", false, 0, true},
	}
	for _, tt := range tests {
		s, active, err := ParseLIOInfo([]byte(tt.in))
		if (err != nil) != tt.bad || active != tt.active || len(s.Addrs) != tt.addrs {
			t.Errorf("%s: got %+v active=%v err=%v", tt.name, s, active, err)
		}
	}
}

func TestStatic(t *testing.T) {
	s, err := NewStatic([]StaticConsumer{
		{Resource: "pool", Addr: "192.0.2.5", Device: "/dev/loop3"},
		{Addr: "::ffff:192.0.2.6", Device: "dm-0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	atts, _ := s.Attachments(context.Background())
	if len(atts) != 2 || atts[0].Resource != "pool" || atts[1].Addr != netip.MustParseAddr("192.0.2.6") {
		t.Errorf("attachments = %+v", atts)
	}
	for _, bad := range []StaticConsumer{{Addr: "host1", Device: "sda"}, {Addr: "192.0.2.7"}} {
		if _, err := NewStatic([]StaticConsumer{{Addr: "192.0.2.1", Device: "sda"}, bad}); err == nil || !strings.Contains(err.Error(), "static consumer 2") {
			t.Errorf("NewStatic(%+v): err = %v, want one naming consumer 2", bad, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
