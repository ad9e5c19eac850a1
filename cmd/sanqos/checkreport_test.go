package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCheckReportFixtures runs 'sanqos check --json' against hosts
// captured in testdata/check and asserts each line's status, the backend
// chosen and the exit.
func TestCheckReportFixtures(t *testing.T) {
	noProbe := func([]string) error { return errors.New("not in a fixture") }
	okProbe := func([]string) error { return nil }
	fixed := []string{"--consumer", "fs-a,192.0.2.7,loop0", "--consumer", "fs-a,192.0.2.8,loop0"}
	for _, c := range []struct {
		name    string
		host    string
		euid    int
		probe   func([]string) error
		args    []string
		wantRun bool
		want    map[string]string // line name -> status (kernel and caps)
		backend string
		lacks   string // in backend.why
		why     string // in backend.why too, for auto's choice
	}{
		{
			name: "this host, nfqueue", host: "host", probe: okProbe, args: fixed, wantRun: true, backend: "nfqueue",
			want: map[string]string{"iptables": "ok", "ipset": "ok", "nfqueue": "ok", "htb": "ok", "netem": "missing",
				"fq": "missing", "dm": "missing", "clsact": "ok", "cls_bpf": "ok", "btf": "ok", "block probe": "ok",
				"CAP_NET_ADMIN": "ok", "CAP_SYS_NICE": "ok", "root": "ok"},
		},
		{
			name: "this host, edt lacks fq", host: "host", probe: okProbe, args: append([]string{"--backend", "edt", "--dev", "lo"}, fixed...),
			backend: "edt", lacks: "fq", want: map[string]string{"fq": "missing", "CAP_BPF": "ok"},
		},
		{
			name: "this host, auto is nfqueue for the missing fq", host: "host", probe: okProbe, args: append([]string{"--backend", "auto", "--dev", "lo"}, fixed...),
			wantRun: true, backend: "nfqueue", why: "auto: nfqueue, not edt: the kernel lacks fq: fq qdisc (departure times): CONFIG_NET_SCH_FQ is not set",
		},
		{
			name: "modular kernel, auto is edt", host: "modular", probe: okProbe, args: append([]string{"--backend", "auto", "--dev", "lo"}, fixed...),
			backend: "edt", why: "auto: edt on lo: the kernel has fq, clsact, cls_bpf, bpf",
		},
		{
			name: "modular kernel, auto without dev is nfqueue", host: "modular", probe: okProbe, args: append([]string{"--backend", "auto"}, fixed...),
			backend: "nfqueue", why: "auto: nfqueue, not edt: no dev",
		},
		{
			name: "this host, netem lacks netem", host: "host", probe: okProbe, args: append([]string{"--backend", "netem", "--dev", "lo"}, fixed...),
			backend: "netem", lacks: "netem",
		},
		{
			name: "this host, probe off", host: "host", probe: noProbe, args: append([]string{"--probe", "off"}, fixed...), wantRun: true,
			backend: "nfqueue", want: map[string]string{"block probe": "off"},
		},
		{
			name: "this host, probe fails to load", host: "host", probe: noProbe, args: fixed, wantRun: true,
			backend: "nfqueue", want: map[string]string{"block probe": "missing"},
		},
		{
			name: "modular kernel, not root", host: "modular", euid: 1000, probe: okProbe, args: fixed, backend: "nfqueue",
			want: map[string]string{"iptables": "ok", "ipset": "ok", "nfqueue": "module", "netem": "module", "fq": "ok",
				"dm": "ok", "btf": "missing", "block probe": "missing", "root": "missing", "CAP_NET_ADMIN": "missing"},
		},
		{
			name: "modular kernel, dry-run as a user", host: "modular", euid: 1000, probe: okProbe, args: append([]string{"--backend", "dry-run"}, fixed...),
			wantRun: true, backend: "dry-run", want: map[string]string{"root": "ok"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			ck := checker{sys: fixtureSystem{root: "testdata/check/" + c.host}, loadProbe: c.probe, euid: c.euid}
			err := runCheck(context.Background(), append([]string{"--json"}, c.args...), &out, &errb, ck)
			if (err == nil) != c.wantRun {
				t.Errorf("err = %v, want would run %v", err, c.wantRun)
			}
			var r checkReport
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, out.String())
			}
			if r.WouldRun != c.wantRun {
				t.Errorf("would_run %v, want %v (reasons %v)", r.WouldRun, c.wantRun, r.Reasons)
			}
			got := map[string]checkItem{}
			for _, it := range append(r.Kernel, r.Capabilities...) {
				got[it.Name] = it
			}
			for name, st := range c.want {
				if got[name].Status != st {
					t.Errorf("%s: %q (%s), want %q", name, got[name].Status, got[name].Detail, st)
				}
			}
			if r.Backend.Name != c.backend {
				t.Errorf("backend %q, want %q", r.Backend.Name, c.backend)
			}
			reasons := strings.Join(r.Reasons, "; ")
			if !c.wantRun && c.euid != 0 && !strings.Contains(reasons, "not root; no CAP_NET_ADMIN") {
				t.Errorf("reasons %q do not say root and CAP_NET_ADMIN are missing", reasons)
			}
			if c.lacks != "" && !strings.Contains(reasons, "lacks "+c.lacks) {
				t.Errorf("reasons %q do not say the host lacks %s", reasons, c.lacks)
			}
			if c.why != "" && (!strings.Contains(r.Backend.Why, c.why) || r.Backend.Asked != "auto") {
				t.Errorf("backend why %q asked %q, want it to say %q of auto", r.Backend.Why, r.Backend.Asked, c.why)
			}
			if c.lacks != "" && !strings.Contains(r.Backend.Why, "lacks "+c.lacks) {
				t.Errorf("backend why %q does not say it lacks %s", r.Backend.Why, c.lacks)
			}
			if r.Discovery.Adapter != "--consumer" || len(r.Discovery.Resources) != 1 || len(r.Discovery.Resources[0].Consumers) != 2 {
				t.Errorf("discovery %+v, want the two fixed consumers of fs-a", r.Discovery)
			}
		})
	}
}

// TestCheckIptablesFlavour: the flavour is read from 'iptables -V'.
func TestCheckIptablesFlavour(t *testing.T) {
	for host, want := range map[string]string{"host": "nft (iptables v1.8.9 (nf_tables))", "modular": "legacy (iptables v1.8.9 (legacy))"} {
		it := probeIptables(context.Background(), fixtureSystem{root: "testdata/check/" + host})
		if it.Status != stOK || !strings.HasPrefix(it.Detail, want) {
			t.Errorf("%s: %+v, want ok %q", host, it, want)
		}
	}
	if it := probeIptables(context.Background(), fixtureSystem{root: t.TempDir()}); it.Status != stMissing {
		t.Errorf("no iptables: %+v, want missing", it)
	}
}

// TestCheckHumanOutput: one line per item, and the verdict last.
func TestCheckHumanOutput(t *testing.T) {
	var out, errb bytes.Buffer
	ck := checker{sys: fixtureSystem{root: "testdata/check/host"}, loadProbe: func([]string) error { return nil }}
	if err := runCheck(context.Background(), []string{"--consumer", "fs-a,192.0.2.7,loop0"}, &out, &errb, ck); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"kernel     netem              missing  netem qdisc: CONFIG_NET_SCH_NETEM is not set\n",
		"kernel     iptables           ok       nft (",
		"backend    nfqueue            ok       nfqueue (the default)",
		"resource   fs-a               ok       192.0.2.7 on loop0\n",
		"configuration OK: sanqos run would start\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLiveCheckThisHost runs check on this host as root, in a network
// namespace of its own, and asserts it reports what this kernel has
// (DESIGN.md "Environment facts": no netem, fq or device-mapper; nft
// iptables, NFQUEUE, ipset, BTF) and changes nothing: the namespace's
// rules, sets and qdiscs are the same after it.
func TestLiveCheckThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare")
	}
	cmd := exec.Command("unshare", "-n", os.Args[0], "-test.run=^TestHelperCheck$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SANQOS_HELPER_CHECK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", out)
}

func TestHelperCheck(t *testing.T) {
	if os.Getenv("SANQOS_HELPER_CHECK") == "" {
		t.Skip("helper of TestLiveCheckThisHost")
	}
	state := func() string {
		var b strings.Builder
		for _, c := range [][]string{{"iptables-save"}, {"ip6tables-save"}, {"ipset", "list", "-n"}, {"tc", "qdisc", "show"}} {
			o, _ := exec.Command(c[0], c[1:]...).CombinedOutput()
			b.Write(o)
		}
		if _, err := os.Stat("/proc/modules"); err == nil {
			o, _ := os.ReadFile("/proc/modules")
			b.Write(o)
		}
		return b.String()
	}
	before := state()
	var out, errb bytes.Buffer
	rc := dispatch([]string{"check", "--json", "--consumer", "fs-a,192.0.2.7,loop0"}, &out, &errb)
	if after := state(); after != before {
		t.Errorf("check changed the system:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if rc != 0 {
		t.Errorf("exit %d: %s", rc, errb.String())
	}
	var r checkReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	got := map[string]checkItem{}
	for _, it := range append(r.Kernel, r.Capabilities...) {
		got[it.Name] = it
		t.Logf("%-14s %-8s %s", it.Name, it.Status, it.Detail)
	}
	for name, st := range map[string]string{"iptables": "ok", "ipset": "ok", "nfqueue": "ok", "netem": "missing",
		"fq": "missing", "dm": "missing", "btf": "ok", "CAP_NET_ADMIN": "ok"} {
		if got[name].Status != st {
			t.Errorf("%s: %q (%s), want %q", name, got[name].Status, got[name].Detail, st)
		}
	}
	if !strings.HasPrefix(got["iptables"].Detail, "nft") {
		t.Errorf("iptables flavour %q, want nft", got["iptables"].Detail)
	}
	if !r.WouldRun || r.Backend.Name != "nfqueue" || r.Backend.Status != "ok" {
		t.Errorf("would_run %v, backend %+v; want nfqueue ok", r.WouldRun, r.Backend)
	}
}
