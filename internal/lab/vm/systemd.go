package vm

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// SystemdSuites map a suite name to the -test.run pattern run in a guest
// booted with systemd as PID 1, where the tests install the shipped unit
// (deploy/sanqos.service) unchanged and drive sanqos with systemctl: its
// sandbox and capabilities, reload and clean-up are tested as they ship.
// A suite in both maps boots the guest twice, sanqos-lab as PID 1 first.
var SystemdSuites = map[string]string{
	"systemd": "^(TestKernel|TestSystemd)",
	"all":     "^(TestKernel|TestSystemd)",
	// deb is the Debian package's test alone (TestSystemdDeb).
	"deb": "^(TestKernel.*|TestSystemdDeb)$",
}

// GuestUnit is where the shipped unit is installed in the guest.
const GuestUnit = "/etc/systemd/system/sanqos.service"

// guestTestUnit runs the suite once systemd has booted the guest.
const guestTestUnit = "sanqos-guesttest.service"

// systemdCPUs is the least number of CPUs of a systemd boot: with one,
// the daemon starts neither its real-time packet thread nor the standby,
// and what the unit's sandbox does to them would go untested. Its tests
// assert function, not timing, so the second vCPU's competition for the
// host's cores does not matter to them.
const systemdCPUs = 2

// systemdInit is the guest's PID 1 in a systemd boot.
const systemdInit = "/lib/systemd/systemd"

// maskedUnits are the guest's units that Debian enables and the tests
// must not have started behind their back: they run their own iscsid
// and ganesha (in the target's network namespace), and device-mapper
// and LVM without udev or daemons.
var maskedUnits = []string{
	"iscsid.service", "iscsid.socket", "open-iscsi.service",
	"nfs-ganesha.service", "nfs-ganesha-lock.service",
	"lvm2-monitor.service", "lvm2-lvmpolld.service", "lvm2-lvmpolld.socket",
	"dm-event.service", "dm-event.socket",
	"serial-getty@ttyS0.service", "getty@tty1.service",
}

// boot is one boot of a suite: its init and -test.run pattern.
type bootPlan struct {
	systemd bool
	pattern string
}

// plan lists the boots of a suite, sanqos-lab as PID 1 first.
func plan(suite string) []bootPlan {
	var p []bootPlan
	if pat, ok := Suites[suite]; ok {
		p = append(p, bootPlan{pattern: pat})
	}
	if pat, ok := SystemdSuites[suite]; ok {
		p = append(p, bootPlan{systemd: true, pattern: pat})
	}
	return p
}

// systemdCmdline boots the initramfs with systemd as PID 1; the suite is
// named by the test unit in the initrd.
func systemdCmdline() string {
	return "console=ttyS0 rdinit=" + systemdInit + " panic=-1 loglevel=4 systemd.show_status=error"
}

// guestTestUnitText is the unit that runs the suite in a systemd boot.
// Its output goes to the journal; the runner writes the tests' output
// and the result line to the console itself, so that the result is on
// the console before poweroff, whatever journald forwards.
func guestTestUnitText(suite string, verbose bool) string {
	v := ""
	if verbose {
		v = " -v"
	}
	return fmt.Sprintf(`[Unit]
Description=sanqos kernel lab: suite %[1]s with systemd as PID 1
After=basic.target

[Service]
Type=oneshot
ExecStart=%[2]s vm guest-systemd --suite %[1]s%[3]s
StandardOutput=journal
StandardError=journal
`, suite, GuestLabBin, v)
}

// addSystemdUnits adds to the payload the shipped unit (unit, read
// from the tree), the test unit, enabled, and the masks.
func addSystemdUnits(w *CPIOWriter, o Options) error {
	for _, d := range []string{"etc/systemd", "etc/systemd/system", "etc/systemd/system/multi-user.target.wants"} {
		if err := w.Dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := w.CopyFile(strings.TrimPrefix(GuestUnit, "/"), o.Unit, 0o644); err != nil {
		return fmt.Errorf("the unit to test, %s: %w", o.Unit, err)
	}
	if err := w.File("etc/systemd/system/"+guestTestUnit, 0o644, []byte(guestTestUnitText(o.Suite, o.Verbose))); err != nil {
		return err
	}
	if err := w.Symlink("etc/systemd/system/multi-user.target.wants/"+guestTestUnit, "../"+guestTestUnit); err != nil {
		return err
	}
	for _, u := range maskedUnits {
		if err := w.Symlink("etc/systemd/system/"+u, "/dev/null"); err != nil {
			return err
		}
	}
	return nil
}

// GuestSystemd runs the suite in a guest booted with systemd (it is the
// test unit's ExecStart): the set-up systemd does not do (the lab's
// modules, configfs), the suite, the result line on the console, and
// poweroff.
func GuestSystemd(suite string, verbose bool) {
	console, err := os.OpenFile("/dev/console", os.O_WRONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		console = os.Stdout
	}
	fmt.Fprintf(console, "%s suite %s (systemd)\n", initMarker, suite)
	rc := 1
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(console, "guest-systemd panic: %v\n", r)
			rc = 1
		}
		fmt.Fprintf(console, "%s rc=%d\n", ResultMarker, rc)
		syscall.Sync()
		// --no-block: this unit is one that poweroff stops.
		if out, err := exec.Command("systemctl", "poweroff", "--no-block").CombinedOutput(); err != nil {
			fmt.Fprintf(console, "guest-systemd: systemctl poweroff: %v: %s\n", err, out)
		}
	}()
	if err := guestSetup(console, false); err != nil {
		fmt.Fprintf(console, "guest-systemd: %v\n", err)
		return
	}
	pat, ok := SystemdSuites[suite]
	if !ok {
		fmt.Fprintf(console, "guest-systemd: unknown suite %q\n", suite)
		return
	}
	rc = runSuite(suite, pat, verbose, console)
}

// mounted reports whether something is mounted on dir.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// GuestDebDir is where a systemd boot finds the packages of the package
// test: DebFirst (what make deb built), DebNext (its successor, with a
// changed default configuration) and DebCycle (test-cycle.sh).
const (
	GuestDebDir = "/usr/local/share/sanqos-lab/deb"
	DebFirst    = "sanqos-first.deb"
	DebNext     = "sanqos-next.deb"
	DebCycle    = "test-cycle.sh"
)

// addDebs adds o.Deb, its successor and test-cycle.sh to the payload.
func addDebs(w *CPIOWriter, o Options) error {
	if o.Deb == "" {
		return nil
	}
	dir := strings.TrimPrefix(GuestDebDir, "/")
	for _, d := range []string{"usr/local/share", "usr/local/share/sanqos-lab", dir} {
		if err := w.Dir(d, 0o755); err != nil {
			return err
		}
	}
	next, err := NextDeb(o.Deb)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(next))
	files := []struct{ name, from string }{{DebFirst, o.Deb}, {DebNext, next}}
	if o.DebCycle != "" {
		files = append(files, struct{ name, from string }{DebCycle, o.DebCycle})
	}
	for _, f := range files {
		if err := w.CopyFile(dir+"/"+f.name, f.from, 0o755); err != nil {
			return fmt.Errorf("the package test's %s: %w", f.name, err)
		}
	}
	return nil
}

// NextDeb makes the successor of a package in a temporary directory (the
// caller removes it): its Debian revision raised from -1 to -2 and a line
// added to its configuration, as a release that ships a new default
// does (internal/lint's TestDeb makes it the same way). It is not
// compressed: decompressing under emulation costs the guest seconds.
func NextDeb(deb string) (string, error) {
	dir, err := os.MkdirTemp("", "sanqos-kernel-lab-deb-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		os.RemoveAll(dir)
		return "", fmt.Errorf("making the successor of %s: %w", deb, err)
	}
	tree := filepath.Join(dir, "tree")
	if out, err := exec.Command("dpkg-deb", "-R", deb, tree).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("dpkg-deb -R: %v: %s", err, out))
	}
	control := filepath.Join(tree, "DEBIAN/control")
	b, err := os.ReadFile(control)
	if err != nil {
		return fail(err)
	}
	next := regexp.MustCompile(`(?m)^(Version: .*)-1$`).ReplaceAll(b, []byte("${1}-2"))
	if bytes.Equal(next, b) {
		return fail(fmt.Errorf("no Debian revision -1 in its control file"))
	}
	if err := os.WriteFile(control, next, 0o644); err != nil {
		return fail(err)
	}
	conf := filepath.Join(tree, "etc/sanqos/sanqos.toml")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString(NextDebConfigLine + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	sums, err := exec.Command("sh", "-c", `cd "$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum`, "sh", tree).Output()
	if err != nil {
		return fail(fmt.Errorf("md5sums: %w", err))
	}
	if err := os.WriteFile(filepath.Join(tree, "DEBIAN/md5sums"), sums, 0o644); err != nil {
		return fail(err)
	}
	out := filepath.Join(dir, "next.deb")
	if o, err := exec.Command("dpkg-deb", "--root-owner-group", "-Znone", "--build", tree, out).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("dpkg-deb --build: %v: %s", err, o))
	}
	os.RemoveAll(tree)
	return out, nil
}

// NextDebConfigLine is what the successor adds to the configuration.
const NextDebConfigLine = "# a new default of the next release (kernel lab)"
