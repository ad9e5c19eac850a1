package lint

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makeCmd runs make in the module root with args, outside any make that
// runs the test (its MAKEFLAGS would reach this one).
func makeCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", args...)
	cmd.Dir = moduleRoot(t)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// packageManager matches a command that installs system packages.
var packageManager = regexp.MustCompile(`\b(apt-get|apt|aptitude|dpkg|debconf|dnf|yum|rpm)\b`)

// TestBuildAndInstallRunNoPackageManager: building and installing the
// daemon touch no package manager (make deps and the lab targets do).
func TestBuildAndInstallRunNoPackageManager(t *testing.T) {
	for _, target := range []string{"build", "install", "uninstall"} {
		t.Run(target, func(t *testing.T) {
			// BIN out of the tree: install's build of a missing binary shows.
			out, err := makeCmd(t, "-n", target, "BIN="+t.TempDir())
			if err != nil {
				t.Fatalf("make -n %s: %v\n%s", target, err, out)
			}
			if m := packageManager.FindString(out); m != "" {
				t.Errorf("make -n %s runs %s:\n%s", target, m, out)
			}
			if target == "build" && !strings.Contains(out, "go build") {
				t.Errorf("make -n build builds nothing:\n%s", out)
			}
		})
	}
}

// TestInstallUninstall stages make install in DESTDIR for several
// prefixes: the daemon, its unit with the Exec lines on the prefix's
// binary, the minimal configuration, the example, the manual pages and
// the bash completion; make uninstall removes every file again, and keeps
// a configuration the administrator changed.
func TestInstallUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sanqos and its manual pages")
	}
	// The first install builds the binary, and the pages from its --help,
	// into bin; the others reuse them.
	bin := t.TempDir()
	for _, tc := range []struct {
		name, prefix, sbin string
		editConfig         bool
	}{
		{name: "default prefix", sbin: "/usr/local/sbin/sanqos"},
		{name: "prefix /usr", prefix: "/usr", sbin: "/usr/sbin/sanqos"},
		{name: "prefix /opt/sanqos", prefix: "/opt/sanqos", sbin: "/opt/sanqos/sbin/sanqos"},
		{name: "edited configuration kept", prefix: "/usr", sbin: "/usr/sbin/sanqos", editConfig: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := t.TempDir()
			args := []string{"DESTDIR=" + dest, "BIN=" + bin}
			if tc.prefix != "" {
				args = append(args, "PREFIX="+tc.prefix)
			}
			if out, err := makeCmd(t, append([]string{"install"}, args...)...); err != nil {
				t.Fatalf("make install: %v\n%s", err, out)
			}
			prefix := tc.prefix
			if prefix == "" {
				prefix = "/usr/local"
			}
			for path, mode := range map[string]fs.FileMode{
				tc.sbin:                              0o755,
				"/etc/systemd/system/sanqos.service": 0o644,
				"/etc/sanqos/sanqos.toml":            0o644,
				prefix + "/share/doc/sanqos/examples/sanqos.example.toml": 0o644,
				prefix + "/share/man/man8/sanqos.8":                       0o644,
				prefix + "/share/man/man8/sanqos-run.8":                   0o644,
				prefix + "/share/bash-completion/completions/sanqos":      0o644,
			} {
				fi, err := os.Stat(filepath.Join(dest, path))
				if err != nil {
					t.Errorf("install did not put %s in place: %v", path, err)
					continue
				}
				if fi.Mode().Perm() != mode {
					t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
				}
			}
			unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/sanqos.service"))
			if err != nil {
				t.Fatal(err)
			}
			var execs int
			for _, l := range strings.Split(string(unit), "\n") {
				if !strings.HasPrefix(l, "Exec") || strings.HasPrefix(l, "ExecReload=/bin/kill") {
					continue
				}
				execs++
				if !strings.Contains(l, "="+tc.sbin+" ") {
					t.Errorf("installed unit: %q does not run %s", l, tc.sbin)
				}
			}
			if execs < 2 {
				t.Errorf("installed unit has %d Exec lines that run sanqos, want ExecStart and ExecStopPost at least", execs)
			}
			config := filepath.Join(dest, "etc/sanqos/sanqos.toml")
			if tc.editConfig {
				if err := os.WriteFile(config, []byte("threshold = \"10ms\"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := makeCmd(t, append([]string{"uninstall"}, args...)...); err != nil {
				t.Fatalf("make uninstall: %v\n%s", err, out)
			}
			var left []string
			filepath.WalkDir(dest, func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					left = append(left, strings.TrimPrefix(path, dest))
				}
				return nil
			})
			want := []string(nil)
			if tc.editConfig {
				want = []string{"/etc/sanqos/sanqos.toml"}
			}
			if strings.Join(left, " ") != strings.Join(want, " ") {
				t.Errorf("after make uninstall, left %q, want %q", left, want)
			}
		})
	}
}
