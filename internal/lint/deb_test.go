package lint

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/helpdoc"
)

// TestDeb builds the Debian package with make deb (as root, as make test
// runs; not with -short), which checks it with lintian; it checks its control
// fields, files and conffiles, and runs deploy/debian/test-cycle.sh on it
// in a temporary directory: install, an upgrade that keeps a changed
// configuration, remove, purge.
func TestDeb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: dpkg-deb --root-owner-group and dpkg --instdir need it")
	}
	for _, p := range []string{"dpkg-deb", "dpkg", "dpkg-query"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed: not a Debian machine", p)
		}
	}
	root := moduleRoot(t)
	bin := t.TempDir()
	// make deb installs lintian where it is missing and apt can, and
	// fails on any error or warning it has not overridden (with the
	// tags in its output).
	out, err := makeCmd(t, "deb", "BIN="+bin)
	if err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(bin, "*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %q, want one package", debs)
	}
	deb := debs[0]
	version := strings.TrimSpace(run(t, root, filepath.Join(root, "deploy/debian/version.sh")))
	arch := strings.TrimSpace(run(t, root, "dpkg", "--print-architecture"))
	if want := "sanqos_" + version + "_" + arch + ".deb"; filepath.Base(deb) != want {
		t.Errorf("package %s, want %s", filepath.Base(deb), want)
	}

	t.Run("lintian", func(t *testing.T) {
		if _, err := exec.LookPath("lintian"); err != nil || strings.Contains(out, "lintian could not be installed") {
			t.Skip("lintian could not be installed (no apt, no network?): the package is not checked")
		}
		t.Log("make deb ran lintian --fail-on error,warning --display-info: clean")
	})

	t.Run("info", func(t *testing.T) {
		for field, want := range map[string]string{
			"Package":      "sanqos",
			"Version":      version,
			"Architecture": arch,
			// What the daemon runs: iptables, ip6tables and their -save
			// and -restore; ipset; tc (iproute2). tgtadm belongs to the
			// target, which may as well be LIO.
			"Depends":  "iptables, ipset, iproute2",
			"Suggests": "tgt",
		} {
			if got := strings.TrimSpace(run(t, root, "dpkg-deb", "-f", deb, field)); got != want {
				t.Errorf("%s: %q, want %q", field, got, want)
			}
		}
		if got := run(t, root, "dpkg-deb", "-I", deb, "conffiles"); got != "/etc/sanqos/sanqos.toml\n" {
			t.Errorf("conffiles: %q, want only /etc/sanqos/sanqos.toml", got)
		}
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			if _, err := exec.Command("dpkg-deb", "-I", deb, s).Output(); err != nil {
				t.Errorf("no %s: %v", s, err)
			}
		}
	})

	x := t.TempDir()
	run(t, root, "dpkg-deb", "-x", deb, x)
	t.Run("contents", func(t *testing.T) {
		// One page per command the binary lists but the lab's.
		help := run(t, root, filepath.Join(x, "usr/sbin/sanqos"), "--help")
		top, err := helpdoc.ParseTop(help)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"/etc/sanqos/sanqos.toml",
			"/lib/systemd/system/sanqos.service",
			"/usr/sbin/sanqos",
			"/usr/share/bash-completion/completions/sanqos",
			"/usr/share/doc/sanqos/changelog.Debian.gz",
			"/usr/share/doc/sanqos/copyright",
			"/usr/share/doc/sanqos/examples/sanqos.example.toml",
			"/usr/share/lintian/overrides/sanqos",
			"/usr/share/man/man8/sanqos.8.gz",
		}
		for _, c := range top.Commands {
			if c.Name != "lab" && c.Name != "sim" {
				want = append(want, "/usr/share/man/man8/sanqos-"+c.Name+".8.gz")
			}
		}
		slices.Sort(want)
		var got []string
		line := regexp.MustCompile(`^(\S+) (\S+)\s+\d+ \S+ \S+ \.(/\S*)`)
		for _, l := range strings.Split(strings.TrimSpace(run(t, root, "dpkg-deb", "--contents", deb)), "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				t.Errorf("unexpected line of dpkg-deb --contents: %q", l)
				continue
			}
			if m[2] != "root/root" {
				t.Errorf("%s is owned by %s, want root/root", m[3], m[2])
			}
			if strings.HasPrefix(m[1], "d") {
				continue
			}
			wantMode := "-rw-r--r--"
			if m[3] == "/usr/sbin/sanqos" {
				wantMode = "-rwxr-xr-x"
			}
			if m[1] != wantMode {
				t.Errorf("%s: mode %s, want %s", m[3], m[1], wantMode)
			}
			got = append(got, m[3])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("files:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		for pkg, src := range map[string]string{
			"etc/sanqos/sanqos.toml":                            "deploy/sanqos.toml",
			"usr/share/doc/sanqos/examples/sanqos.example.toml": "deploy/sanqos.example.toml",
		} {
			a, _ := os.ReadFile(filepath.Join(x, pkg))
			b, _ := os.ReadFile(filepath.Join(root, src))
			if !bytes.Equal(a, b) {
				t.Errorf("/%s is not %s", pkg, src)
			}
		}
		unit, err := os.ReadFile(filepath.Join(x, "lib/systemd/system/sanqos.service"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(unit), "\n") {
			if strings.HasPrefix(l, "Exec") && strings.Contains(l, "sanqos ") && !strings.Contains(l, "=/usr/sbin/sanqos ") {
				t.Errorf("unit: %q does not run /usr/sbin/sanqos", l)
			}
		}
		upstream := version[:strings.LastIndex(version, "-")]
		if v := run(t, root, filepath.Join(x, "usr/sbin/sanqos"), "version"); !strings.HasPrefix(v, "sanqos "+upstream+"\n") {
			t.Errorf("sanqos version says %q, want sanqos %s", v, upstream)
		}
	})

	t.Run("cycle", func(t *testing.T) {
		deb2 := repack(t, root, deb)
		out, err := exec.Command(filepath.Join(root, "deploy/debian/test-cycle.sh"), "--instdir", t.TempDir(), deb, deb2).CombinedOutput()
		if err != nil {
			t.Errorf("test-cycle.sh: %v\n%s", err, out)
		}
	})
}

// repack makes the next version of deb: its Debian revision raised and
// its configuration changed, as a release that ships a new default does.
func repack(t *testing.T, root, deb string) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	run(t, root, "dpkg-deb", "-R", deb, tree)
	control := filepath.Join(tree, "DEBIAN/control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	next := regexp.MustCompile(`(?m)^(Version: .*)-1$`).ReplaceAll(b, []byte("${1}-2"))
	if bytes.Equal(next, b) {
		t.Fatalf("no Debian revision -1 in\n%s", b)
	}
	if err := os.WriteFile(control, next, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(tree, "etc/sanqos/sanqos.toml")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("# a new default of the next release\n")
	f.Close()
	sums := run(t, tree, "sh", "-c", `find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum`)
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN/md5sums"), []byte(sums), 0o644); err != nil {
		t.Fatal(err)
	}
	deb2 := filepath.Join(dir, "next.deb")
	run(t, root, "dpkg-deb", "--root-owner-group", "--build", tree, deb2)
	return deb2
}

// run runs a command in dir and returns its standard output; it fails
// the test when the command fails.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
