// Command genman writes the manual pages and the bash completion of
// sanqos from the --help output of a built binary (make build runs it):
// DIR/man8/sanqos.8 and sanqos-COMMAND.8, and DIR/bash-completion/sanqos.
// The lab's commands (sim, lab: the separate sanqos-lab, which is not
// installed) get no page and no flags.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sanqos/sanqos/internal/helpdoc"
)

func main() {
	bin := flag.String("bin", "bin/sanqos", "the sanqos binary whose help is documented")
	out := flag.String("out", "bin/doc", "output directory")
	version := flag.String("version", "dev", "version for the pages' footer")
	date := flag.String("date", "", "date for the pages' header (YYYY-MM-DD)")
	skip := flag.String("skip", "sim,lab", "comma-separated commands that get no page (they are sanqos-lab's)")
	flag.Parse()
	if err := run(*bin, *out, strings.Split(*skip, ","), helpdoc.Meta{Version: *version, Date: *date}); err != nil {
		fmt.Fprintf(os.Stderr, "genman: %v\n", err)
		os.Exit(1)
	}
}

// help runs bin with args and returns what it printed; --help exits 0.
func help(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	// No sanqos-lab is found for the commands skipped anyway, and none of
	// the environment's JOURNAL_STREAM or locale changes the text.
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, buf.String())
	}
	return buf.String(), nil
}

// extraSections are what a page says beside its help: the other modes of
// a command and the files of the installed daemon.
func extraSections(bin, name string) ([]helpdoc.Section, error) {
	switch name {
	case "run":
		text, err := help(bin, "run", "--manual", "--help")
		if err != nil {
			return nil, err
		}
		h, err := helpdoc.Parse(text)
		if err != nil {
			return nil, fmt.Errorf("run --manual --help: %w", err)
		}
		usage := [][]string{{"Usage: " + strings.Join(h.Synopsis, "; ")}}
		return []helpdoc.Section{
			{Title: "Manual mode", Paras: append(usage, h.Description...)},
			files,
			{Title: "Signals", Paras: [][]string{
				{"SIGTERM and SIGINT stop the daemon: held packets are released in order, then everything it made is removed."},
				{"SIGHUP re-reads the configuration file (systemctl reload sanqos); a bad file is refused and the running configuration goes on."},
			}},
			{Title: "Environment", Paras: [][]string{
				{"NOTIFY_SOCKET, WATCHDOG_USEC: set by systemd for the unit's Type=notify and WatchdogSec=."},
				{"JOURNAL_STREAM: when it names the daemon's stderr (systemd's journal), each log line starts with its syslog priority <N>, so that journalctl -p warning shows warnings and errors."},
			}},
		}, nil
	}
	return nil, nil
}

var files = helpdoc.Section{Title: "Files", Paras: [][]string{
	{"/etc/sanqos/sanqos.toml", "  the configuration (sanqos run --config); the flags override it."},
	{"/usr/share/doc/sanqos/examples/sanqos.example.toml", "  every key, documented (deploy/sanqos.example.toml in the source)."},
	{"/run/sanqos/sanqos.sock", "  the root-only control socket of sanqos throttle, status and top."},
	{"/var/log/sanqos", "  where a --record file belongs under the systemd unit."},
}}

func run(bin, out string, skip []string, m helpdoc.Meta) error {
	text, err := help(bin, "--help")
	if err != nil {
		return err
	}
	top, err := helpdoc.ParseTop(text)
	if err != nil {
		return fmt.Errorf("sanqos --help: %w", err)
	}
	man := filepath.Join(out, "man8")
	if err := os.MkdirAll(man, 0o755); err != nil {
		return err
	}
	var documented []helpdoc.Command
	flags := map[string][]helpdoc.Flag{}
	seeAlso := []string{"sanqos(8)"}
	for _, c := range top.Commands {
		if !slices.Contains(skip, c.Name) {
			seeAlso = append(seeAlso, "sanqos-"+c.Name+"(8)")
		}
	}
	for _, c := range top.Commands {
		if slices.Contains(skip, c.Name) {
			continue
		}
		text, err := help(bin, c.Name, "--help")
		if err != nil {
			return err
		}
		h, err := helpdoc.Parse(text)
		if err != nil {
			return fmt.Errorf("sanqos %s --help: %w", c.Name, err)
		}
		extra, err := extraSections(bin, c.Name)
		if err != nil {
			return err
		}
		others := slices.DeleteFunc(slices.Clone(seeAlso), func(r string) bool { return r == "sanqos-"+c.Name+"(8)" })
		page := helpdoc.CommandPage(c.Name, c.Summary, h, extra, others, m)
		if err := os.WriteFile(filepath.Join(man, "sanqos-"+c.Name+".8"), []byte(page), 0o644); err != nil {
			return err
		}
		documented = append(documented, c)
		flags[c.Name] = h.Flags
	}
	unit := helpdoc.Section{Title: "Service", Paras: [][]string{
		{"The systemd unit sanqos.service runs sanqos run --config /etc/sanqos/sanqos.toml as root with only the capabilities it needs, a watchdog, a reload command (SIGHUP) and a clean-up after every stop (sanqos run --cleanup-only)."},
		{"Its log goes to the journal with a priority per line: journalctl -u sanqos -p warning shows the warnings and errors."},
	}}
	page := helpdoc.TopPage(top, documented, []helpdoc.Section{unit, files}, append(seeAlso[1:], "systemctl(1)", "journalctl(1)"), m)
	if err := os.WriteFile(filepath.Join(man, "sanqos.8"), []byte(page), 0o644); err != nil {
		return err
	}
	comp := filepath.Join(out, "bash-completion")
	if err := os.MkdirAll(comp, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(comp, "sanqos"), []byte(helpdoc.Bash(top.Commands, flags)), 0o644)
}
