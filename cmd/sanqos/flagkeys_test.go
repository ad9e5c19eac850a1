package main

import (
	"flag"
	"io"
	"regexp"
	"slices"
	"testing"

	"github.com/sanqos/sanqos/internal/config"
)

// noFileKey are the flags of 'sanqos run' that have no configuration
// key, each with why: every other setting must be possible in the file,
// so that a unit never needs a drop-in to change its command line.
var noFileKey = map[string]string{
	"config":        "names the file itself",
	"cleanup-only":  "an action, not a setting",
	"manual":        "a mode of the command line (ExecStart), not a setting",
	"proc":          "a fixture root for tests and the lab",
	"consumer":      "the file form is [[static.consumers]]",
	"small-segment": "the file form is small_segment.<port>, per port",
}

// TestEveryRunFlagHasAKey walks run's flag set: a flag either names its
// configuration key, which the file accepts, or is in noFileKey. Issue
// 34: --dev and --queue-num had no key, so the tc backends needed a
// drop-in.
func TestEveryRunFlagHasAKey(t *testing.T) {
	c := config.Default()
	fs, _ := newRunFlagSet("run", "", io.Discard, &c)
	keyRE := regexp.MustCompile(`\(config key ([a-z_.]+)\)$`)
	known := config.KnownKeys()
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		m := keyRE.FindStringSubmatch(f.Usage)
		if _, ok := noFileKey[f.Name]; ok {
			if m != nil {
				t.Errorf("--%s is allowed no key but has key %s: drop it from noFileKey", f.Name, m[1])
			}
			return
		}
		if m == nil {
			t.Errorf("--%s has no configuration key: add one (internal/config flagDefs) or, if it makes no sense in a file, to noFileKey with why", f.Name)
			return
		}
		if !slices.Contains(known, m[1]) {
			t.Errorf("--%s names key %s, which the file does not accept (known: %v)", f.Name, m[1], known)
		}
	})
	for name := range noFileKey {
		if !seen[name] {
			t.Errorf("noFileKey names --%s, which run does not have", name)
		}
	}
	for _, want := range []string{"dev", "queue-num"} {
		if !seen[want] {
			t.Errorf("run has no --%s", want)
		}
	}
}
