package config

import (
	"os/exec"
	"strings"
	"testing"
)

// TestConfigIsData: the configuration is data (issue 33). It must not
// link the packages it configures, which validate their own values: a
// config that imports them ends up checking them again, with bounds of
// its own. Its dependencies are listed with `go list -deps` (the
// package itself, not its tests) and every one under sanqos/internal
// must be a leaf utility allowed here.
func TestConfigIsData(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH to list the dependencies with")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const self = "github.com/sanqos/sanqos/internal/config"
	// allowed are leaves: no decision, no data path, no discovery.
	allowed := map[string]bool{self: true, "github.com/sanqos/sanqos/internal/units": true}
	var deps []string
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasPrefix(p, "github.com/sanqos/sanqos/") {
			continue
		}
		deps = append(deps, p)
		if !allowed[p] {
			t.Errorf("internal/config depends on %s, which it may not: the packages it configures validate their own values; it imports only leaf utilities, like internal/units", p)
		}
	}
	if len(deps) == 0 {
		t.Fatal("go list -deps listed nothing of this module: the test would pass on anything")
	}
}
