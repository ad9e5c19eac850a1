package main

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// TestLiveAutoOnThisHost: on this host's kernel (no sch_fq, DESIGN.md
// "Environment facts") backend auto resolves to nfqueue and says the
// missing fq is why, and opens it; and when the kernel lines had said
// yes (a kernel that refuses edt anyway), the edt that would not start
// falls back to nfqueue, saying so. In a network namespace of its own.
func TestLiveAutoOnThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: iptables, ipset and NFQUEUE in a new network namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	if err := kernelHas(edtKernelItems(hostSystem{}))("fq"); err == nil {
		t.Skip("this host's kernel has fq: auto would choose edt here")
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestHelperAuto$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SANQOS_HELPER_AUTO=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestHelperAuto runs inside the namespace of TestLiveAutoOnThisHost.
func TestHelperAuto(t *testing.T) {
	if os.Getenv("SANQOS_HELPER_AUTO") == "" {
		t.Skip("helper of TestLiveAutoOnThisHost")
	}
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v\n%s", err, out)
	}
	var stderr bytes.Buffer
	o, err := parseRunOptions([]string{"--manual", "--backend", "auto", "--dev", "lo", "--queue-num", "81"}, true, &stderr)
	if err != nil {
		t.Fatalf("parsing: %v\n%s", err, stderr.String())
	}
	resolveBackend(&o, hostSystem{})
	if o.backend.Backend != "nfqueue" || o.asked != throttle.Auto || !strings.Contains(o.backendWhy, "lacks fq") {
		t.Fatalf("auto resolved to %q (asked %q) because %q; want nfqueue for the missing fq", o.backend.Backend, o.asked, o.backendWhy)
	}
	open := func(o runOptions) string {
		var logs bytes.Buffer
		b, err := openBackend(t.Context(), &o, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("opening %s: %v\n%s", o.backend.Backend, err, logs.String())
		}
		if b.Name() != "nfqueue" {
			t.Errorf("opened %s, want nfqueue", b.Name())
		}
		if err := b.Close(); err != nil {
			t.Errorf("closing: %v", err)
		}
		t.Logf("%s", logs.String())
		return logs.String()
	}
	if logs := open(o); !strings.Contains(logs, "backend=nfqueue") || !strings.Contains(logs, "lacks fq") {
		t.Errorf("the start log does not say nfqueue and why:\n%s", logs)
	}
	// As if the kernel lines had said yes: edt is tried and refused by
	// this kernel (no fq), and nfqueue runs instead.
	o.backend.Backend, o.backendWhy = "edt", "auto: edt on lo: the kernel lines said so"
	logs := open(o)
	if !strings.Contains(logs, "would not start") || !strings.Contains(logs, "auto: nfqueue, because edt would not start") {
		t.Errorf("the fall back from edt is not logged with its reason:\n%s", logs)
	}
	if s, _ := exec.Command("tc", "qdisc", "show", "dev", "lo").CombinedOutput(); strings.Contains(string(s), "clsact") || strings.Contains(string(s), "fq ") {
		t.Errorf("edt's attempt left a qdisc on lo:\n%s", s)
	}
}
