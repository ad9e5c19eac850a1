package vm

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readCPIO parses a newc archive into name → (mode, content).
func readCPIO(t *testing.T, b []byte) map[string][2]string {
	t.Helper()
	out := map[string][2]string{}
	off := 0
	align := func() {
		if off%4 != 0 {
			off += 4 - off%4
		}
	}
	for {
		if off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off += 110 + namesize
		align()
		data := string(b[off : off+size])
		off += size
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = [2]string{strconv.FormatUint(uint64(mode), 8), data}
	}
}

func TestCPIOWriter(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "etc", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc", "a"), []byte("hello"), 0o640)
	os.WriteFile(filepath.Join(dir, "etc", "sub", "odd"), []byte("x"), 0o755)
	os.Symlink("usr/lib", filepath.Join(dir, "lib"))
	os.MkdirAll(filepath.Join(dir, "skipme"), 0o755)
	os.WriteFile(filepath.Join(dir, "skipme", "f"), []byte("no"), 0o644)
	os.Mkdir(filepath.Join(dir, "tmp"), 0o755)
	os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky)

	var buf bytes.Buffer
	w := NewCPIOWriter(&buf)
	if err := w.AddTree(dir, "", func(rel string) bool { return rel == "skipme" }); err != nil {
		t.Fatal(err)
	}
	if err := w.File("usr/local/bin/x", 0o755, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	want := map[string][2]string{
		"etc":             {"40755", ""},
		"etc/a":           {"100640", "hello"},
		"etc/sub":         {"40755", ""},
		"etc/sub/odd":     {"100755", "x"},
		"lib":             {"120777", "usr/lib"},
		"tmp":             {"41777", ""},
		"usr/local/bin/x": {"100755", "abc"},
	}
	if len(got) != len(want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := Run(ctx, Options{Suite: "nope"}, io.Discard); err == nil || !strings.Contains(err.Error(), "choose one of") {
		t.Errorf("unknown suite: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := Run(ctx, Options{Suite: "smoke"}, io.Discard); err == nil || !strings.Contains(err.Error(), "apt-get install qemu-system-x86") {
		t.Errorf("no qemu: %v", err)
	}
}

func TestCheckStatic(t *testing.T) {
	if err := checkStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("/bin/sh: %v, want a dynamically-linked error", err)
	}
	if err := checkStatic(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing binary accepted")
	}
}

func TestQemuArgs(t *testing.T) {
	o := Options{Suite: "smoke", Timeout: time.Minute}
	args := strings.Join(qemuArgs(o, "tcg", Kernel{Vmlinuz: "/k"}, "/i", kernelCmdline(o)), " ")
	for _, w := range []string{"-accel tcg -cpu max", "-smp 1", "-no-reboot", "-nic none", "-kernel /k", "-initrd /i",
		"rdinit=" + GuestLabBin, "panic=-1", "-- vm guest-init --suite smoke"} {
		if !strings.Contains(args, w) {
			t.Errorf("qemu args %q lack %q", args, w)
		}
	}
	for name := range Suites {
		if name == "" {
			t.Error("empty suite name")
		}
	}
}

func TestPlan(t *testing.T) {
	for _, c := range []struct {
		suite string
		want  []bool // systemd, per boot
	}{
		{"smoke", []bool{false}},
		{"systemd", []bool{true}},
		{"all", []bool{false, true}}, // sanqos-lab as PID 1 first
		{"nope", nil},
	} {
		var got []bool
		for _, b := range plan(c.suite) {
			got = append(got, b.systemd)
			if b.pattern == "" {
				t.Errorf("%s: a boot without a pattern", c.suite)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("plan(%s) boots systemd %v, want %v", c.suite, got, c.want)
		}
	}
	if !slices.Contains(SuiteNames(), "systemd") {
		t.Errorf("SuiteNames %v lacks systemd", SuiteNames())
	}
	if _, err := Run(context.Background(), Options{Suite: "systemd"}, io.Discard); err == nil || !strings.Contains(err.Error(), "--unit") {
		t.Errorf("systemd suite without a unit: %v", err)
	}
}

// TestSystemdPayload: the unit is installed byte for byte, the test unit
// is enabled and runs the suite, and the masks point to /dev/null.
func TestSystemdPayload(t *testing.T) {
	unit, err := os.ReadFile("../../../deploy/sanqos.service")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w := NewCPIOWriter(&buf)
	if err := addSystemdUnits(w, Options{Suite: "systemd", Unit: "../../../deploy/sanqos.service", Verbose: true}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	if u := got[strings.TrimPrefix(GuestUnit, "/")]; u[1] != string(unit) || u[0] != "100644" {
		t.Errorf("the unit in the guest differs from deploy/sanqos.service (mode %s)", u[0])
	}
	gt := got["etc/systemd/system/"+guestTestUnit][1]
	if !strings.Contains(gt, GuestLabBin+" vm guest-systemd --suite systemd -v") {
		t.Errorf("test unit does not run the suite:\n%s", gt)
	}
	if l := got["etc/systemd/system/multi-user.target.wants/"+guestTestUnit]; l != [2]string{"120777", "../" + guestTestUnit} {
		t.Errorf("test unit not enabled: %v", l)
	}
	for _, m := range maskedUnits {
		if l := got["etc/systemd/system/"+m]; l[1] != "/dev/null" {
			t.Errorf("%s not masked: %v", m, l)
		}
	}
	if !strings.Contains(systemdCmdline(), "rdinit="+systemdInit) {
		t.Errorf("cmdline %q does not boot systemd", systemdCmdline())
	}
}

// TestDebPayload: with a package, the systemd boot's payload carries it,
// its successor (revision -2, a line added to the configuration, md5sums
// to match) and test-cycle.sh; without one, nothing.
func TestDebPayload(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not installed")
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	for p, text := range map[string]string{
		"DEBIAN/control":         "Package: sanqos\nVersion: 1.0-1\nArchitecture: all\nMaintainer: lab <lab@example.org>\nDescription: test\n test\n",
		"etc/sanqos/sanqos.toml": "# shipped\n",
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755)
		if err := os.WriteFile(filepath.Join(tree, p), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "first.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", tree, deb).CombinedOutput(); err != nil {
		t.Skipf("dpkg-deb --build: %v\n%s", err, out)
	}
	var buf bytes.Buffer
	w := NewCPIOWriter(&buf)
	if err := addDebs(w, Options{}); err != nil || buf.Len() != 0 {
		t.Fatalf("without a package: %v, %d bytes", err, buf.Len())
	}
	if err := addDebs(w, Options{Deb: deb, DebCycle: "../../../deploy/debian/test-cycle.sh"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got := readCPIO(t, buf.Bytes())
	at := strings.TrimPrefix(GuestDebDir, "/") + "/"
	if f := got[at+DebCycle]; !strings.HasPrefix(f[1], "#!/bin/sh") {
		t.Errorf("test-cycle.sh not in the payload: %v", f[0])
	}
	next := filepath.Join(dir, "next.deb")
	if err := os.WriteFile(next, []byte(got[at+DebNext][1]), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, _ := exec.Command("dpkg-deb", "-f", next, "Version").Output(); strings.TrimSpace(string(v)) != "1.0-2" {
		t.Errorf("successor's version %q, want 1.0-2", v)
	}
	x := filepath.Join(dir, "x")
	if out, err := exec.Command("dpkg-deb", "-R", next, x).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(x, "etc/sanqos/sanqos.toml")); string(b) != "# shipped\n"+NextDebConfigLine+"\n" {
		t.Errorf("successor's configuration %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(x, "DEBIAN/md5sums")); !strings.Contains(string(b), "etc/sanqos/sanqos.toml") {
		t.Errorf("successor's md5sums %q", b)
	}
	if got[at+DebFirst][1] == "" {
		t.Error("the package itself is not in the payload")
	}
}
