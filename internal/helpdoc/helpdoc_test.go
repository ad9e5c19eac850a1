package helpdoc

import (
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The shapes cmd/sanqos and internal/cli print (abridged).
const topHelp = `sanqos keeps the read response time of shared storage below a threshold.

When many consumers share one storage pool, a few writers can make every
reader wait.

Usage:
  sanqos <command> [flags]

Commands:
  run        run the QoS daemon (autonomic control, or --manual throttling only)
  lab        bring up the iSCSI lab on this machine and run experiments (sanqos-lab)

Run 'sanqos <command> --help' for the flags of a command.
`

const runHelp = `Usage: sanqos run [--config FILE] [flags]
       sanqos run --manual [flags]

Run the QoS daemon.
'sanqos top' reads it; .dots stay text.

Example:
  sanqos run --config /etc/sanqos/sanqos.toml

Flags:
  -ack-delay
    	hold pure ACKs (default true)
  -config file
    	TOML configuration file
  -record value
    	write one JSON line per tick to this file
  -tick value
    	sampling and control period (config key tick) (default 100ms)
`

func TestParseTop(t *testing.T) {
	top, err := ParseTop(topHelp)
	if err != nil {
		t.Fatal(err)
	}
	want := Top{
		Summary:     "sanqos keeps the read response time of shared storage below a threshold.",
		Description: [][]string{{"When many consumers share one storage pool, a few writers can make every", "reader wait."}},
		Synopsis:    []string{"sanqos <command> [flags]"},
		Commands: []Command{
			{"run", "run the QoS daemon (autonomic control, or --manual throttling only)"},
			{"lab", "bring up the iSCSI lab on this machine and run experiments (sanqos-lab)"},
		},
	}
	if !reflect.DeepEqual(top, want) {
		t.Errorf("got %#v\nwant %#v", top, want)
	}
}

func TestParse(t *testing.T) {
	h, err := Parse(runHelp)
	if err != nil {
		t.Fatal(err)
	}
	want := Help{
		Synopsis: []string{"sanqos run [--config FILE] [flags]", "sanqos run --manual [flags]"},
		Description: [][]string{
			{"Run the QoS daemon.", "'sanqos top' reads it; .dots stay text."},
			{"Example:", "  sanqos run --config /etc/sanqos/sanqos.toml"},
		},
		Flags: []Flag{
			{"ack-delay", "", "hold pure ACKs (default true)"},
			{"config", "file", "TOML configuration file"},
			{"record", "value", "write one JSON line per tick to this file"},
			{"tick", "value", "sampling and control period (config key tick) (default 100ms)"},
		},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %#v\nwant %#v", h, want)
	}
}

func TestParseRejects(t *testing.T) {
	for name, text := range map[string]string{
		"no usage":         "Run the daemon.\n",
		"junk among flags": "Usage: sanqos x\n\nFlags:\n  -a\n    \tA\nsomething else\n",
		"usage first":      "Usage: sanqos x\n\nFlags:\n    \torphan usage\n",
	} {
		if _, err := Parse(text); err == nil {
			t.Errorf("%s: Parse accepted %q", name, text)
		}
	}
	if _, err := ParseTop("sanqos does things.\n"); err == nil {
		t.Error("ParseTop accepted a help without Usage: and Commands:")
	}
}

func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"plain words":                "plain words",
		"read-over-write policy":     "read-over-write policy",
		"see --config FILE":          `see \-\-config FILE`,
		"(--ack-delay=false)":        `(\-\-ack\-delay=false)`,
		"'sanqos top' reads":         `\&'sanqos top' reads`,
		".dots":                      `\&.dots`,
		`a \ backslash`:              `a \e backslash`,
		"-v, --version":              `\-v, \-\-version`,
		"sanqos-<instance>-* ipsets": "sanqos-<instance>-* ipsets",
	} {
		if got := esc(in); got != want {
			t.Errorf("esc(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCommandPageRenders: the page is valid roff without warnings (where
// groff is installed), and every flag is in it.
func TestCommandPageRenders(t *testing.T) {
	h, err := Parse(runHelp)
	if err != nil {
		t.Fatal(err)
	}
	page := CommandPage("run", "run the QoS daemon", h, []Section{{Title: "Files", Paras: [][]string{{"/etc/sanqos/sanqos.toml"}}}},
		[]string{"sanqos(8)"}, Meta{Version: "1.0", Date: "2026-11-28"})
	for _, s := range []string{`.TH SANQOS\-RUN 8 "2026-11-28" "sanqos 1.0"`, `\fB\-\-ack\-delay\fR`, `\fB\-\-config\fR \fIfile\fR`, ".SH FILES", ".BR sanqos (8)"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q:\n%s", s, page)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		t.Skip("groff is not installed: the page's roff is not checked")
	}
	cmd := exec.Command("groff", "-man", "-ww", "-z", "-rCHECKSTYLE=3")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff: %v\n%s\n%s", err, out, page)
	}
}

// TestBashCompletion runs the generated completion in bash: the
// commands, then a command's flags, then file names only for file flags.
func TestBashCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	h, err := Parse(runHelp)
	if err != nil {
		t.Fatal(err)
	}
	script := Bash([]Command{{"run", ""}, {"lab", ""}}, map[string][]Flag{"run": h.Flags})
	dir := t.TempDir()
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"sanqos", ""}, "run lab --help --version"},
		{[]string{"sanqos", "r"}, "run"},
		{[]string{"sanqos", "run", "--"}, "--help --ack-delay --config --record --tick"},
		{[]string{"sanqos", "run", "--ack-delay", "--t"}, "--tick"},
		{[]string{"sanqos", "run", "-config", dir + "/"}, dir + "/probe"},
		{[]string{"sanqos", "run", "--tick", ""}, ""},
		{[]string{"sanqos", "lab", "--"}, ""},
	} {
		line := "COMP_WORDS=(" + quoteAll(tc.words) + "); COMP_CWORD=" + strconv.Itoa(len(tc.words)-1) + "; _sanqos; echo \"${COMPREPLY[*]}\""
		cmd := exec.Command("bash", "--norc", "--noprofile", "-c", script+"\ntouch "+dir+"/probe\n"+line)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
		}
	}
}

func quoteAll(words []string) string {
	var q []string
	for _, w := range words {
		q = append(q, "'"+w+"'")
	}
	return strings.Join(q, " ")
}
