package main

import (
	"io"
	"strings"
	"testing"

	"github.com/sanqos/sanqos/internal/act/throttle"
)

// TestResolveBackendOnFixtures: auto on the captured hosts: the
// development host (no fq) gets nfqueue and the kernel line that says
// so; the modular Debian-shaped kernel (fq, clsact, cls_bpf loadable or
// loaded) gets edt; a backend named outright is left alone.
func TestResolveBackendOnFixtures(t *testing.T) {
	for _, c := range []struct {
		host, backend string
		args          []string
		want, why     string
		asked         string
	}{
		{"host", "auto", []string{"--dev", "eth0"}, "nfqueue", "lacks fq: fq qdisc (departure times): CONFIG_NET_SCH_FQ is not set", "auto"},
		{"modular", "auto", []string{"--dev", "eth0"}, "edt", "auto: edt on eth0", "auto"},
		{"modular", "auto", []string{"--dev", "eth0", "--ack-delay=false"}, "nfqueue", "ack_delay is off", "auto"},
		{"modular", "auto", []string{"--dev", "eth0", "--rate-dev", "eth0"}, "nfqueue", "rate_dev is dev eth0", "auto"},
		{"modular", "nfqueue", nil, "nfqueue", "", ""},
		{"host", "edt", []string{"--dev", "eth0"}, "edt", "", ""},
	} {
		args := append([]string{"--manual", "--backend", c.backend}, c.args...)
		o, err := parseRunOptions(args, true, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		resolveBackend(&o, fixtureSystem{root: "testdata/check/" + c.host})
		if o.backend.Backend != c.want || o.asked != c.asked || !strings.Contains(o.backendWhy, c.why) {
			t.Errorf("%s %v: %q asked %q why %q; want %q asked %q why %q", c.host, args, o.backend.Backend, o.asked, o.backendWhy, c.want, c.asked, c.why)
		}
	}
}

// TestKernelHasStatuses: a loadable module counts as there, a line that
// says missing or nothing does not, and the reason is the line's.
func TestKernelHasStatuses(t *testing.T) {
	has := kernelHas([]checkItem{
		{Name: "fq", Status: stModule, Detail: "sch_fq not loaded"},
		{Name: "clsact", Status: stOK},
		{Name: "cls_bpf", Status: stMissing, Detail: "CONFIG_NET_CLS_BPF is not set"},
		{Name: "bpf", Status: stUnknown, Detail: "no kernel config"},
	})
	for f, want := range map[string]string{"fq": "", "clsact": "", "cls_bpf": "CONFIG_NET_CLS_BPF is not set", "bpf": "nothing says it has it (no kernel config)", "btf": "not probed"} {
		err := has(f)
		if (err == nil) != (want == "") || (err != nil && err.Error() != want) {
			t.Errorf("%s: %v, want %q", f, err, want)
		}
	}
}

// TestReloadKeepsAutosChoice: a reload that still asks for auto keeps
// the running choice and is not a "backend changed"; one from auto to
// another backend is.
func TestReloadKeepsAutosChoice(t *testing.T) {
	dir := t.TempDir()
	_, cur := portsConfig(t, dir, "backend = \"auto\"\ndev = \"eth0\"\n")
	resolveBackend(&cur, fixtureSystem{root: "testdata/check/modular"})
	if cur.backend.Backend != "edt" {
		t.Fatalf("auto on the modular fixture: %q (%s), want edt", cur.backend.Backend, cur.backendWhy)
	}
	_, again := portsConfig(t, dir, "backend = \"auto\"\ndev = \"eth0\"\n")
	keepChoice(cur, &again)
	if got := restartOnly(cur, again); len(got) != 0 || again.backend.Backend != "edt" || again.asked != throttle.Auto {
		t.Errorf("reload still asking auto: restart for %v, backend %q asked %q", got, again.backend.Backend, again.asked)
	}
	_, nfq := portsConfig(t, dir, "backend = \"nfqueue\"\ndev = \"eth0\"\n")
	keepChoice(cur, &nfq)
	if got := strings.Join(restartOnly(cur, nfq), ", "); !strings.Contains(got, "backend") {
		t.Errorf("auto (edt) to nfqueue: restart for %q, want the backend named", got)
	}
}
