package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: 'sanqos check' accepts what run accepts and refuses, with
// run's error and a non-zero exit, what run refuses; the unit's
// ExecReload relies on the exit code.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.toml", "threshold = \"15ms\"\nbackend = \"dry-run\"\n[discovery]\nadapter = \"lio\"\n")
	for _, c := range []struct {
		name    string
		args    []string
		rc      int
		wantOut string
	}{
		{"good file", []string{"--config", good}, 0, "configuration OK"},
		{"example file", []string{"--config", "../../deploy/sanqos.example.toml"}, 0, "configuration OK"},
		{"bad value", []string{"--config", write("bad.toml", "threshold = \"fast\"\n")}, 1, "threshold"},
		{"not TOML", []string{"--config", write("broken.toml", "threshold = \n")}, 1, "nothing was started"},
		{"unknown adapter", []string{"--config", write("adapter.toml", "[discovery]\nadapter = \"iscsi\"\n")}, 1, "iscsi"},
		{"socket adapter without ports", []string{"--config", write("socket.toml", "ports = []\n[discovery]\nadapter = \"socket\"\n")}, 1, "port"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.toml")}, 1, "none.toml"},
		{"flag overrides file", []string{"--config", good, "--threshold", "-1ms"}, 1, "threshold"},
		{"config only", []string{"--config-only", "--config", good}, 0, "configuration OK\n"},
		{"config only, bad", []string{"--config", write("bad2.toml", "threshold = \"fast\"\n"), "--config-only"}, 1, "threshold"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			rc := dispatch(append([]string{"check"}, c.args...), &out, &errb)
			if rc != c.rc {
				t.Fatalf("rc = %d, want %d\nstdout: %s\nstderr: %s", rc, c.rc, out.String(), errb.String())
			}
			if got := out.String() + errb.String(); !strings.Contains(got, c.wantOut) {
				t.Errorf("output %q lacks %q", got, c.wantOut)
			}
		})
	}
}
