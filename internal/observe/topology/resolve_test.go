package topology

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func fixtureResolver() *Resolver {
	return NewResolver("testdata/sys", "testdata/dev", "testdata/mountinfo")
}

func TestResolve(t *testing.T) {
	r := fixtureResolver()
	tests := []struct {
		backing string
		want    Resolution
	}{
		{"/dev/sda1", Resolution{Device: "sda1", Leaves: []string{"sda"}, Name: "disk-sda"}},
		{"sda2", Resolution{Device: "sda2", Leaves: []string{"sda"}, Name: "disk-sda"}},
		{"/dev/mapper/data-lun1", Resolution{Device: "dm-0", Leaves: []string{"sdb", "sdc"}, Name: "vg-data"}},
		{"/dev/data/lun1", Resolution{Device: "dm-0", Leaves: []string{"sdb", "sdc"}, Name: "vg-data"}},
		{"/dev/dm-1", Resolution{Device: "dm-1", Leaves: []string{"sdc"}, Name: "vg-data"}},
		{"/dev/mapper/luks-secure", Resolution{Device: "dm-3", Leaves: []string{"sdd"}, Name: "vg-my-vg"}},
		{"/dev/loop0", Resolution{Device: "loop0", Leaves: []string{"sda"}, Name: "fs-sda2"}},
		{"/dev/loop1", Resolution{Device: "loop1", Leaves: []string{"sda"}, Name: "fs-sda2"}},
		{"/dev/loop2", Resolution{Device: "loop2", Leaves: []string{"fs:/mnt/sanqos disk"}, Name: "fs-mnt/sanqos disk"}},
		{"/dev/md0", Resolution{Device: "md0", Leaves: []string{"sdf", "sdg"}, Name: "md-md0"}},
		{"/dev/disk/by-id/wwn-0x5000c500a1b2c3d4", Resolution{Device: "sde", Leaves: []string{"sde"}, Name: "disk-sde"}},
		// An image file served directly: the partition holding it.
		{"/srv/images/direct.img", Resolution{Device: "sda2", Leaves: []string{"sda"}, Name: "fs-sda2"}},
	}
	for _, tt := range tests {
		got, err := r.Resolve(tt.backing)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tt.backing, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Resolve(%q) = %+v, want %+v", tt.backing, got, tt.want)
		}
	}
}

func TestResolveErrors(t *testing.T) {
	r := fixtureResolver()
	tests := []struct{ backing, want string }{
		{"/dev/nosuch", "not a block device"},
		{"nvme9n1", "no such block device"},
		{"/mnt/sanqos disk/c.img", "attach it to a loop device"},
		{"/run/x.img", "no block device"},
	}
	for _, tt := range tests {
		_, err := r.Resolve(tt.backing)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Resolve(%q) error = %v, want it to contain %q", tt.backing, err, tt.want)
		}
	}
	bad := NewResolver("testdata/sys", "testdata/dev", "testdata/nosuch-mountinfo")
	if _, err := bad.Resolve("/dev/sda1"); err == nil {
		t.Error("Resolve with a missing mountinfo succeeded")
	}
}

// A malformed mount table is an error that names the file and line (the
// parser itself is tested in internal/observe/mountinfo).
func TestResolveMalformedMountinfo(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(mi, []byte("22 28 0:21 / /sys rw - sysfs sysfs rw\n28 1 x:1 / / rw - ext4 /dev/sda1 rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewResolver("testdata/sys", "testdata/dev", mi)
	if _, err := r.Resolve("/dev/sda1"); err == nil || !strings.Contains(err.Error(), mi+" line 2") {
		t.Errorf("Resolve with a malformed mountinfo: error %v, want one naming %s line 2", err, mi)
	}
}

func TestMountName(t *testing.T) {
	a, b := mountName("/export/a/images/mnt"), mountName("/export/b/images/mnt")
	for _, tt := range []struct{ in, want string }{
		{"/", "root"},
		{"/mnt/sanqos disk", "mnt/sanqos disk"},
		{"/run/sanqos-lab/emu", "emu-"},
		{"/tmp/sanqos-emu-1480536830/mnt", "mnt-"},
		{"/export/a/images/mnt", "images/mnt-"},
		{"/srv/a/images/mnt", "srv/a/images/mnt"},
	} {
		got := mountName(tt.in)
		if !strings.HasPrefix(got, tt.want) || len(SanitizeName("fs-"+got)) > MaxNameLen {
			t.Errorf("mountName(%q) = %q, want prefix %q within %d bytes with fs-", tt.in, got, tt.want, MaxNameLen)
		}
		if SanitizeName("fs-"+got) != "fs-"+strings.NewReplacer("/", "-", " ", "-").Replace(got) {
			t.Errorf("mountName(%q) = %q is altered by sanitizing: %q", tt.in, got, SanitizeName("fs-"+got))
		}
	}
	if a == b {
		t.Errorf("mounts with the same tail share name %q", a)
	}
}

func TestGroupNameCollision(t *testing.T) {
	mk := func(addr, leaf, name string) Placed {
		return Placed{Consumer: Consumer{Addr: netip.MustParseAddr(addr)}, Resolution: Resolution{Leaves: []string{leaf}, Name: name}}
	}
	x, y := mk("10.0.0.1", "fs:/a b", "fs-a b"), mk("10.0.0.2", "fs:/a-b", "fs-a-b")
	n1 := Group([]Placed{x, y})
	n2 := Group([]Placed{y, x})
	if !reflect.DeepEqual(n1, n2) || n1.Resources[0].Name == n1.Resources[1].Name {
		t.Errorf("colliding names not resolved stably: %+v / %+v", n1, n2)
	}
	// Alone, a group keeps its plain name.
	if n := Group([]Placed{x}).Resources[0].Name; n != "fs-a-b" {
		t.Errorf("single group named %q", n)
	}
}

func TestLVMVG(t *testing.T) {
	for in, want := range map[string]string{
		"data-lun1":         "data",
		"my--vg-secure--lv": "my-vg",
		"a--b--c-d":         "a-b-c",
		"novg":              "novg",
	} {
		if got := lvmVG(in); got != want {
			t.Errorf("lvmVG(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSanitizeName(t *testing.T) {
	long := SanitizeName("fs-mnt/very/long/mount point/for images")
	long2 := SanitizeName("fs-mnt/very/long/mount point/for images2")
	if len(long) > MaxNameLen || len(long2) > MaxNameLen {
		t.Errorf("long names %q %q exceed %d", long, long2, MaxNameLen)
	}
	if long == long2 {
		t.Errorf("two long names collapsed to %q", long)
	}
	if again := SanitizeName("fs-mnt/very/long/mount point/for images"); again != long {
		t.Errorf("not stable: %q then %q", long, again)
	}
	for in, want := range map[string]string{
		"vg-data":            "vg-data",
		"fs-mnt/sanqos disk": "fs-mnt-sanqos-disk",
		"Disk-SDB":           "disk-sdb",
		"--":                 "res",
		"a..b__c":            "a..b__c",
	} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGroup(t *testing.T) {
	r := fixtureResolver()
	c := func(addr, dev string) Consumer {
		return Consumer{Addr: netip.MustParseAddr(addr), Device: dev}
	}
	var items []Placed
	for _, x := range []struct{ addr, backing string }{
		{"10.0.0.1", "/dev/loop0"},            // file on sda2 ─┐
		{"10.0.0.2", "/dev/sda1"},             // partition  ───┤ share sda
		{"10.0.0.3", "/dev/mapper/data-lun1"}, // sdb+sdc ──┐
		{"10.0.0.4", "/dev/dm-1"},             // sdc ──────┘ share vg data
		{"10.0.0.5", "/dev/loop2"},            // FUSE ──┐
		{"10.0.0.6", "/dev/loop3"},            // FUSE ──┘
		{"10.0.0.7", "/dev/mapper/luks-secure"},
	} {
		res, err := r.Resolve(x.backing)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, Placed{Consumer: c(x.addr, res.Device), Resolution: res})
	}
	items = append(items, Placed{Consumer: c("10.0.0.8", "sde"), Resource: "gold pool"})
	topo := Group(items)
	got := map[string][]string{}
	for _, res := range topo.Resources {
		for _, con := range res.Consumers {
			got[res.Name] = append(got[res.Name], con.Addr.String())
		}
	}
	want := map[string][]string{
		"fs-sda2":            {"10.0.0.1", "10.0.0.2"},
		"vg-data":            {"10.0.0.3", "10.0.0.4"},
		"fs-mnt-sanqos-disk": {"10.0.0.5", "10.0.0.6"},
		"vg-my-vg":           {"10.0.0.7"},
		"gold-pool":          {"10.0.0.8"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Group = %v, want %v", got, want)
	}
	// Stable: the same consumers in reverse order give the same topology.
	rev := make([]Placed, len(items))
	for i := range items {
		rev[len(items)-1-i] = items[i]
	}
	if again := Group(rev); !reflect.DeepEqual(again, topo) {
		t.Errorf("Group depends on input order:\n%+v\n%+v", topo, again)
	}
}
