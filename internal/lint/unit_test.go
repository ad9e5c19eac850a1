package lint

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const unitPath = "../../deploy/sanqos.service"

// unitSettings reads the [Service] settings of the unit we ship; a key
// given twice keeps every value.
func unitSettings(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		if k, v, ok := strings.Cut(l, "="); ok && section == "[Service]" {
			m[k] = append(m[k], v)
		}
	}
	return m
}

// TestUnitSettings holds the unit to the fixes of issue 14: device
// resolution must see /dev/mapper and /dev/<vg> (finding 10: it had
// PrivateDevices=yes), descriptors for the bounded listeners and their
// children (finding 2), a watchdog that kills a stopped daemon at once
// (finding 5: SIGABRT would wait TimeoutAbortSec more), reload by SIGHUP
// and clean-up after any end (finding 6).
func TestUnitSettings(t *testing.T) {
	u := unitSettings(t)
	one := func(k string) string {
		t.Helper()
		if len(u[k]) != 1 {
			t.Errorf("%s: %d values %q, want one", k, len(u[k]), u[k])
			return ""
		}
		return u[k][0]
	}
	if v, ok := u["PrivateDevices"]; ok && v[len(v)-1] != "no" {
		t.Errorf("PrivateDevices=%s hides /dev/mapper and /dev/<vg>: LVM-backed LUNs would not resolve", v[len(v)-1])
	}
	if n, err := strconv.Atoi(one("LimitNOFILE")); err != nil || n < 1024 {
		t.Errorf("LimitNOFILE=%s: want a number ≥ 1024 (64 HTTP + 32 control connections, the daemon's own and its children's)", one("LimitNOFILE"))
	}
	if one("Type") != "notify" {
		t.Errorf("Type=%s: the watchdog and READY=1 need Type=notify", one("Type"))
	}
	if one("WatchdogSec") == "" {
		t.Error("no WatchdogSec: a stopped daemon would hold packets for ever")
	}
	if s := one("WatchdogSignal"); s != "SIGKILL" {
		t.Errorf("WatchdogSignal=%s: a stopped process cannot take it; want SIGKILL", s)
	}
	// The file is checked first (a bad one fails the reload), then the
	// daemon gets SIGHUP.
	if r := u["ExecReload"]; len(r) != 2 || !strings.Contains(r[0], "sanqos check --config-only --config") || !strings.Contains(r[1], "-HUP") {
		t.Errorf("ExecReload=%q: want 'sanqos check --config-only --config FILE', then SIGHUP (the daemon reloads on it)", r)
	}
	if p := one("ExecStopPost"); !strings.Contains(p, "--cleanup-only") {
		t.Errorf("ExecStopPost=%s: want sanqos run --cleanup-only, so rules never outlive the service", p)
	}
}

// TestUnitVerifies runs systemd's own parser over the unit (with the
// binary's path pointed at an executable that exists here): an unknown
// or misspelt setting is reported, not silently ignored by systemd.
func TestUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: cannot check the unit with systemd's parser")
	}
	text, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "sanqos.service")
	fixed := strings.ReplaceAll(string(text), "/usr/local/sbin/sanqos", "/bin/true")
	if err := os.WriteFile(unit, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		// Dependencies of a unit file outside a running system are not
		// ours to check.
		if l == "" || strings.Contains(l, "network-online.target") || strings.Contains(l, "tgt.service") {
			continue
		}
		problems = append(problems, l)
	}
	if err != nil || len(problems) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(problems, "\n"))
	}
}
