package main

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/observe/topology"
)

func TestWritebackHint(t *testing.T) {
	root := t.TempDir()
	for dev, v := range map[string]string{"dm-3": "0\n", "loop4": "1\n", "sdb": "0\n"} {
		dir := filepath.Join(root, "fs", "sys", "block", dev, "bdi")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "strict_limit"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sys := fixtureSystem{root}
	client := func(dev, backing string) topology.Consumer {
		return topology.Consumer{Addr: netip.MustParseAddr("192.0.2.7"), Device: dev, Backing: backing}
	}
	for _, c := range []struct {
		name, adapter string
		consumers     []topology.Consumer
		want          string // in the hint; "" for none
	}{
		{"an NFS export on a device without a cap", "socket", []topology.Consumer{client("dm-3", "/srv/export"), client("dm-3", "/srv/export")}, "page cache of dm-3,"},
		{"the export's device is capped", "socket", []topology.Consumer{client("loop4", "/srv/export")}, ""},
		{"a block device served as it is", "socket", []topology.Consumer{client("sdb", "/dev/sdb")}, ""},
		{"iSCSI targets are not judged", "tgt", []topology.Consumer{client("dm-3", "/srv/lun.img")}, ""},
		{"a kernel without the file", "socket", []topology.Consumer{client("dm-9", "/srv/export")}, ""},
		{"only the uncapped device is named", "socket", []topology.Consumer{client("loop4", "/a"), client("dm-3", "/b")}, "page cache of dm-3,"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := writebackHint(sys, c.adapter, topology.Resource{Name: "fs-x", Consumers: c.consumers})
			switch {
			case c.want == "" && got != "":
				t.Errorf("hint %q, want none", got)
			case c.want != "" && !strings.Contains(got, c.want):
				t.Errorf("hint %q, want it to contain %q", got, c.want)
			case c.want != "" && !strings.Contains(got, "/sys/block/dm-3/bdi/strict_limit"):
				t.Errorf("hint %q does not say what to write", got)
			}
		})
	}
}
