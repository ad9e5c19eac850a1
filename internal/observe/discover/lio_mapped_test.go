package discover

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLIOMappedLUNs builds the layout the live kernel shows for targetcli's
// mapped LUNs (seen in the kernel lab, sanqos lab vm): each initiator uses
// only the LUNs its ACL maps.
func TestLIOMappedLUNs(t *testing.T) {
	root := t.TempDir()
	tpg := filepath.Join(root, "iscsi", "iqn.2026-11.org.example:t", "tpgt_1")
	must(t, os.MkdirAll(tpg, 0o755))
	must(t, os.WriteFile(filepath.Join(tpg, "enable"), []byte("1\n"), 0o644))
	for i, dev := range []string{"/dev/mapper/vg-a", "/dev/mapper/vg-b"} {
		obj := filepath.Join(root, "core", "iblock_0", strings.TrimPrefix(filepath.Base(dev), "vg-"))
		must(t, os.MkdirAll(obj, 0o755))
		must(t, os.WriteFile(filepath.Join(obj, "udev_path"), []byte(dev+"\n"), 0o644))
		lun := filepath.Join(tpg, "lun", "lun_"+string(rune('0'+i)))
		must(t, os.MkdirAll(lun, 0o755))
		must(t, os.Symlink(obj, filepath.Join(lun, "x1")))
	}
	acl := func(iqn, ip string, luns ...string) {
		d := filepath.Join(tpg, "acls", iqn)
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "info"), []byte("InitiatorName: "+iqn+"\n   Address "+ip+" TCP  StatSN: 0x1\n"), 0o644))
		for i, l := range luns {
			m := filepath.Join(d, "lun_"+string(rune('0'+i)))
			must(t, os.MkdirAll(m, 0o755))
			must(t, os.Symlink("../../../../lun/"+l, filepath.Join(m, "y2")))
		}
	}
	acl("iqn.2026-11.org.example:w", "192.0.2.1", "lun_1")
	acl("iqn.2026-11.org.example:r", "192.0.2.2", "lun_0")
	acl("iqn.2026-11.org.example:all", "192.0.2.3") // no mapped LUNs: all

	atts, err := NewLIO(root).Attachments(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range atts {
		got = append(got, a.Addr.String()+" "+a.Backing)
	}
	slices.Sort(got)
	want := []string{
		"192.0.2.1 /dev/mapper/vg-b",
		"192.0.2.2 /dev/mapper/vg-a",
		"192.0.2.3 /dev/mapper/vg-a",
		"192.0.2.3 /dev/mapper/vg-b",
	}
	if !slices.Equal(got, want) {
		t.Errorf("attachments\n%v\nwant\n%v", got, want)
	}

	// A mapped LUN pointing at a LUN the group lacks is an error.
	acl("iqn.2026-11.org.example:bad", "192.0.2.4", "lun_7")
	if _, err := NewLIO(root).Groups(); err == nil || !strings.Contains(err.Error(), "lun_7") {
		t.Errorf("dangling mapped LUN: err = %v, want one naming lun_7", err)
	}
}
