package main

import (
	"bytes"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// TestLiveCleanupOnlyBadConfig: issue 34. --cleanup-only used to refuse
// a configuration with a typo in an unrelated key (or one others can
// write), so the unit's ExecStopPost removed nothing and a crashed
// daemon's chain, ipsets and qdisc stayed. It must remove them, warn
// about the file and exit 0. Each case runs in a network namespace of
// its own (unshare -n), so that no other test's objects are in reach.
func TestLiveCleanupOnlyBadConfig(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: iptables, ipset, tc in a new network namespace")
	}
	for _, tool := range []string{"unshare", "iptables", "ipset", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, text string
		mode       os.FileMode
		warn       string
	}{
		{"typo in an unrelated key", "threshold = \"15ms\"\nthreshhold = \"20ms\"\n", 0o600, "unknown key threshhold"},
		{"not TOML", "threshold = \n", 0o600, "expected value"},
		{"writable by others", "threshold = \"15ms\"\n", 0o666, "writable by every user"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".toml")
			if err := os.WriteFile(cfg, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(cfg, c.mode); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestHelperCleanupOnly$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "SANQOS_HELPER_CLEANUP="+cfg)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(string(out), c.warn) {
				t.Errorf("the warning does not say what is wrong with the file (%q):\n%s", c.warn, out)
			}
		})
	}
}

// TestHelperCleanupOnly runs inside the namespace of
// TestLiveCleanupOnlyBadConfig: it makes a dead instance's leftovers,
// runs 'sanqos run --cleanup-only' on the file and checks they are gone.
func TestHelperCleanupOnly(t *testing.T) {
	cfg := os.Getenv("SANQOS_HELPER_CLEANUP")
	if cfg == "" {
		t.Skip("helper of TestLiveCleanupOnlyBadConfig")
	}
	sh := func(args ...string) string {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	sh("ip", "link", "set", "lo", "up")
	// What a killed nfqueue instance q77 and a killed htb instance on lo
	// leave: nobody holds their locks.
	sh("iptables", "-t", "mangle", "-N", "SANQOS-q77")
	sh("iptables", "-t", "mangle", "-A", "POSTROUTING", "-j", "SANQOS-q77")
	sh("ipset", "create", "sanqos-q77-w", "hash:ip")
	sh("tc", "qdisc", "add", "dev", "lo", "root", "handle", "54:", "htb")

	// A live instance beside them: q78, running in this process. Its
	// objects are not the clean-up's to touch.
	live, err := throttle.Open(t.Context(), throttle.Options{Backend: "nfqueue", QueueNum: 78, AckDelay: true})
	if err != nil {
		t.Fatalf("starting a live instance: %v", err)
	}
	defer live.Close()
	state := throttle.State{Groups: []throttle.Group{{Name: "fs-a", Members: []netip.Addr{netip.MustParseAddr("192.0.2.9")}, WriteDelay: 5 * time.Millisecond}}}
	if err := live.Apply(t.Context(), state); err != nil {
		t.Fatalf("throttling with the live instance: %v", err)
	}

	var stdout, stderr bytes.Buffer
	rc := dispatch([]string{"run", "--config", cfg, "--cleanup-only"}, &stdout, &stderr)
	t.Logf("exit %d\nstdout: %s\nstderr: %s", rc, stdout.String(), stderr.String())
	if rc != 0 {
		t.Errorf("exit %d, want 0", rc)
	}
	if s := sh("iptables", "-t", "mangle", "-S"); strings.Contains(s, "SANQOS-q77") {
		t.Errorf("chain left:\n%s", s)
	} else if !strings.Contains(s, "-N SANQOS-q78") {
		t.Errorf("the live instance's chain was removed:\n%s", s)
	}
	if s := sh("ipset", "list", "-n"); strings.Contains(s, "sanqos-q77") {
		t.Errorf("ipset left:\n%s", s)
	} else if !strings.Contains(s, "sanqos-q78-") {
		t.Errorf("the live instance's sets were removed:\n%s", s)
	}
	if s := sh("tc", "qdisc", "show", "dev", "lo", "root"); strings.Contains(s, "54:") {
		t.Errorf("qdisc left:\n%s", s)
	}
}
