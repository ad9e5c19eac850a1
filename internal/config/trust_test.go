package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Audit round 2, N10: a configuration any user could write (mode 0666)
// was loaded by root without a word. Whoever writes it chooses the
// record path root truncates, the socket, the ports. Now Load, as root,
// refuses a file or a directory above it that a user other than root
// can change, and says how to fix it.
func TestLoadRefusesConfigOthersCanChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the check applies to root, and chowns files to uid 65534")
	}
	base := t.TempDir() // in /tmp: world-writable with the sticky bit, so allowed
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.WriteFile(p, []byte("threshold = \"20ms\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if _, err := Load(mk("ok.toml", 0o644, 0)); err != nil {
		t.Fatalf("a root-owned 0644 config: %v", err)
	}
	for _, tt := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"world.toml", 0o666, 0, "writable by every user"},
		{"group.toml", 0o664, 0, "writable by its group"},
		{"nobody.toml", 0o644, 65534, "uid 65534"},
	} {
		p := mk(tt.name, tt.mode, tt.uid)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "chmod") {
			t.Errorf("%s: %v, want a refusal saying %q and how to fix it", tt.name, err, tt.want)
		}
	}
	// A root-owned file in a directory another user can write: they can
	// replace it.
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	p := filepath.Join(open, "sanqos.toml")
	if err := os.WriteFile(p, []byte("threshold = \"20ms\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "directory "+open) {
		t.Errorf("config in a world-writable directory: %v, want a refusal naming it", err)
	}
}

// Audit round 2, N10: listen = "999.1.1.1:9469" looks like an address
// but is none; it was taken for a host name and the listener retried for
// ever in the background. It is refused; host names still load.
func TestListenNotAnAddressRefused(t *testing.T) {
	for _, bad := range []string{"999.1.1.1:9469", "127.0.0.256:9469", "1.2.3:9469", "[fe80::zz]:9469"} {
		c := Default()
		c.Listen = bad
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "not an IP address") {
			t.Errorf("listen = %q: %v, want a refusal saying it is not an IP address", bad, err)
		}
	}
	for _, good := range []string{"127.0.0.1:9469", "[::1]:9469", ":9469", "0.0.0.0:9469", "localhost:9469"} {
		c := Default()
		c.Listen = good
		if err := c.Validate(); err != nil {
			t.Errorf("listen = %q: %v", good, err)
		}
	}
}
