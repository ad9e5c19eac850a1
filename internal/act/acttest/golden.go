package acttest

import (
	"os"
	"path/filepath"
	"testing"
)

// Golden compares got with testdata/name, or rewrites it when update is
// set (each test package's own -update flag: a flag defined here would
// clash with those of packages that have one).
func Golden(t *testing.T, update bool, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("reading golden file (run with -update to create it): %v", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from golden file (run with -update if intended):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
