package guesttest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/lab/vm"
	"github.com/sanqos/sanqos/internal/lab/vm/kstack"
	"github.com/sanqos/sanqos/internal/serve/status"
)

// The Debian package under systemd (issue 34). The host built it (make
// deb) and the lab its successor, a higher Debian revision with a line
// added to the shipped configuration (vm.NextDeb); both are in the
// initrd with deploy/debian/test-cycle.sh. The package's unit lives in
// /lib/systemd/system and runs /usr/sbin/sanqos; the suite's own copy of
// deploy/sanqos.service in /etc/systemd/system would shadow it, so it is
// moved aside for this test and put back after. TestSystemdDeb is the
// last test of systemd_test.go, so that what the package leaves in the
// unit's journal or the kernel does not reach the other tests.

const (
	pkgUnit      = "/lib/systemd/system/sanqos.service"
	pkgBin       = "/usr/sbin/sanqos"
	suiteUnitOff = "/etc/sanqos-lab-suite-unit.service.off" // same file system: rename
)

// dpkg runs dpkg as an unattended upgrade does: no prompt, an
// administrator's configuration kept (apt's usual Dpkg::Options).
func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("dpkg", append([]string{"--force-confold", "--force-confdef"}, args...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s\njournal of sanqos:\n%s", strings.Join(args, " "), err, out, journal(t, ""))
	}
	return string(out)
}

// pkgStatus is dpkg's status of sanqos: "ii VERSION", "rc VERSION", or
// "" once purged.
func pkgStatus() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Version}", "sanqos").Output()
	if err != nil {
		return ""
	}
	s := strings.Join(strings.Fields(string(out)), " ")
	if s == "un" || s == "pn" {
		return ""
	}
	return s
}

func debVersion(t *testing.T, deb string) string {
	t.Helper()
	return strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version"))
}

// suiteUnitAside moves the suite's copy of the unit out of the way (and
// the lab's network namespace drop-in), and puts them back when the test
// ends, after purging whatever the package left.
func suiteUnitAside(t *testing.T) {
	t.Helper()
	exec.Command("systemctl", "stop", unitName).Run()
	exec.Command("systemctl", "disable", unitName).Run()
	if err := os.Rename(vm.GuestUnit, suiteUnitOff); err != nil {
		t.Fatalf("moving the suite's unit aside: %v", err)
	}
	os.RemoveAll(filepath.Dir(dropInPath))
	// An earlier test's configuration would be a conffile dpkg did not
	// install; the package starts from a clean machine.
	os.RemoveAll("/etc/sanqos")
	os.RemoveAll("/var/log/sanqos")
	systemctl(t, "daemon-reload")
	t.Cleanup(func() {
		if pkgStatus() != "" {
			exec.Command("dpkg", "-P", "sanqos").Run()
		}
		os.RemoveAll(filepath.Dir(dropInPath))
		if err := os.Rename(suiteUnitOff, vm.GuestUnit); err != nil {
			t.Errorf("putting the suite's unit back: %v", err)
		}
		exec.Command("systemctl", "daemon-reload").Run()
		// The package's stop may have left the unit failed (N9).
		exec.Command("systemctl", "reset-failed", unitName).Run()
	})
}

func debSteps(t *testing.T, first, next, v1, v2 string) {
	s := stack(t)
	// The lab's target lives in a namespace of its own (see
	// systemd_test.go); the drop-in is in place before the install
	// starts the daemon.
	inTargetNS(t)

	installed := time.Now()
	dpkg(t, "-i", first)
	if st := pkgStatus(); st != "ii "+v1 {
		t.Fatalf("after install: status %q, want ii %s", st, v1)
	}
	if p := show(t, "FragmentPath"); p != pkgUnit && p != "/usr"+pkgUnit {
		t.Errorf("FragmentPath %q, want the package's %s", p, pkgUnit)
	}
	if e := show(t, "ExecStart"); !strings.Contains(e, "path="+pkgBin+" ") {
		t.Errorf("ExecStart %q does not run %s", e, pkgBin)
	}
	if e := strings.TrimSpace(systemctl(t, "is-enabled", unitName)); e != "enabled" {
		t.Errorf("after install: %s, want enabled", e)
	}
	if a := show(t, "ActiveState"); a != "active" {
		t.Errorf("after install: %s, want active (the shipped configuration)\n%s", a, journal(t, ""))
	}

	// The administrator's configuration: the LIO stack.
	conf := labConfig("lio", kstack.Port, "")
	writeConfig(t, conf)
	os.Remove(recordPath)
	systemctl(t, "restart", unitName)
	if a := show(t, "ActiveState"); a != "active" {
		t.Fatalf("after restart with the LIO configuration: %s\n%s", a, journal(t, ""))
	}
	vg0 := "vg-" + kstack.VG0
	waitTick(t, 30*time.Second, "the package's daemon discovering "+vg0, func(k status.Record) bool {
		return consumerAt(k, s.Initiators[0].IP, vg0)
	})

	// The shipped configuration names tgt, which this guest has not:
	// the daemon started by the install logged an error for each
	// discovery, and the LIO one logs at info.
	t.Run("journal priorities", func(t *testing.T) {
		stamp := journalStamp(installed)
		all := journalPrio(t, "info", stamp)
		if !strings.Contains(all, "level=INFO") {
			t.Fatalf("no INFO line of the daemon in the journal since the install: nothing to tell apart\n%s", all)
		}
		warn := journalPrio(t, "warning", stamp)
		if !strings.Contains(warn, "level=ERROR") && !strings.Contains(warn, "level=WARN") {
			t.Errorf("journalctl -p warning shows no warning or error of the daemon, though it logged some (priority not passed to journald?):\n%s", lastLines(all, 30))
		}
		for _, l := range strings.Split(warn, "\n") {
			if strings.Contains(l, "level=INFO") || strings.Contains(l, "level=DEBUG") {
				t.Errorf("journalctl -p warning shows an info line (priority not passed to journald): %s", l)
			}
		}
	})

	t.Run("sanqos check", func(t *testing.T) { checkFeatures(t) })

	pid := show(t, "MainPID")
	upgraded := time.Now()
	dpkg(t, "-i", next)
	if st := pkgStatus(); st != "ii "+v2 {
		t.Fatalf("after upgrade: status %q, want ii %s", st, v2)
	}
	if b, _ := os.ReadFile(configPath); string(b) != conf {
		t.Errorf("after upgrade: the administrator's %s is gone:\n%s", configPath, b)
	}
	if b, err := os.ReadFile(configPath + ".dpkg-dist"); err != nil || !strings.Contains(string(b), vm.NextDebConfigLine) {
		t.Errorf("after upgrade: the new shipped configuration is not in %s.dpkg-dist: %v", configPath, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, a := show(t, "MainPID"), show(t, "ActiveState")
		if p != pid && p != "0" && a == "active" {
			t.Logf("upgrade: MainPID %s -> %s", pid, p)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after upgrade: MainPID %s (was %s), %s: not restarted\n%s", p, pid, a, journal(t, ""))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if e := strings.TrimSpace(systemctl(t, "is-enabled", unitName)); e != "enabled" {
		t.Errorf("after upgrade: %s, want enabled", e)
	}
	waitTick(t, 30*time.Second, "ticks of the upgraded daemon", func(k status.Record) bool {
		return k.T.After(upgraded) && consumerAt(k, s.Initiators[0].IP, vg0)
	})

	dpkg(t, "-r", "sanqos")
	if st := pkgStatus(); st != "rc "+v2 {
		t.Errorf("after remove: status %q, want rc %s", st, v2)
	}
	if a := show(t, "ActiveState"); a == "active" || a == "activating" {
		t.Errorf("after remove: sanqos is %s", a)
	}
	if out, err := exec.Command("pgrep", "-x", "sanqos").CombinedOutput(); err == nil {
		t.Errorf("after remove: sanqos processes left: %s", out)
	}
	if _, err := os.Stat(pkgBin); err == nil {
		t.Errorf("after remove: %s is still there", pkgBin)
	}
	if b, _ := os.ReadFile(configPath); string(b) != conf {
		t.Errorf("after remove: %s is not kept", configPath)
	}
	assertClean(t)

	dpkg(t, "-P", "sanqos")
	if st := pkgStatus(); st != "" {
		t.Errorf("after purge: status %q", st)
	}
	os.RemoveAll(filepath.Dir(dropInPath)) // the lab's, not the package's
	for _, p := range []string{"/etc/sanqos", "/var/log/sanqos", "/run/sanqos", "/run/sanqos-locks", pkgUnit, pkgBin,
		"/etc/systemd/system/multi-user.target.wants/sanqos.service",
		"/var/lib/systemd/deb-systemd-helper-enabled/sanqos.service",
		"/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/sanqos.service"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("after purge: %s is still there", p)
		}
	}
	if left, _ := filepath.Glob("/var/lib/dpkg/info/sanqos.*"); len(left) > 0 {
		t.Errorf("after purge: dpkg still has %v", left)
	}
	systemctl(t, "daemon-reload")
	if l := show(t, "LoadState"); l != "not-found" {
		t.Errorf("after purge: systemd still knows the unit (LoadState %s)", l)
	}
}

// journalPrio is the daemon's journal at priority prio or above.
func journalPrio(t *testing.T, prio, since string) string {
	t.Helper()
	out, err := exec.Command("journalctl", "-u", unitName, "-p", prio, "-o", "cat", "--no-pager", "--since", since).CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl -p %s: %v\n%s", prio, err, out)
	}
	return string(out)
}

// checkFeatures runs the installed package's 'sanqos check --json' on
// its configuration: the daemon would run, and the report names the
// kernel features this guest's kernel has (the cloud kernel, with the
// lab's modules loaded) as present.
func checkFeatures(t *testing.T) {
	args := []string{"check", "--config", configPath, "--json"}
	cmd := exec.Command(pkgBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", pkgBin, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	t.Logf("sanqos %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	var rep struct {
		WouldRun bool `json:"would_run"`
		Kernel   []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"kernel"`
		Backend struct {
			Name string `json:"name"`
		} `json:"backend"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("sanqos check --json: not its report: %v", err)
	}
	if !rep.WouldRun {
		t.Error("sanqos check says the daemon would not run with the package's configuration")
	}
	if rep.Backend.Name != "nfqueue" {
		t.Errorf("sanqos check names backend %q, want the default nfqueue", rep.Backend.Name)
	}
	status := map[string]string{}
	for _, k := range rep.Kernel {
		status[k.Name] = k.Status
	}
	for _, f := range []string{"iptables", "ipset", "nfqueue", "netem", "fq", "clsact", "cls_bpf", "btf"} {
		if status[f] != "ok" {
			t.Errorf("sanqos check reports kernel feature %s as %q, which this kernel has", f, status[f])
		}
	}
}
