package lint

import (
	"errors"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// moduleRoot walks up from the test's working directory to the directory
// holding go.mod, so the test checks the whole module wherever it runs.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("finding the working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// packagesWithoutDoc returns, for every directory under roots that holds
// non-test Go files, the directories none of whose files documents the
// package clause. Test-only directories and testdata are not packages.
func packagesWithoutDoc(base string, roots []string) ([]string, error) {
	type pkgInfo struct{ files, documented int }
	pkgs := map[string]*pkgInfo{}
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join(base, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				name := d.Name()
				if name == "testdata" || (strings.HasPrefix(name, ".") && path != filepath.Join(base, root)) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				return err
			}
			dir, _ := filepath.Rel(base, filepath.Dir(path))
			p := pkgs[dir]
			if p == nil {
				p = &pkgInfo{}
				pkgs[dir] = p
			}
			p.files++
			if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
				p.documented++
			}
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	var missing []string
	for dir, p := range pkgs {
		if p.documented == 0 {
			missing = append(missing, dir)
		}
	}
	sort.Strings(missing)
	return missing, nil
}

// TestPackageComments fails when a package under internal/ or cmd/ has no
// package comment: the comment is where a reader learns what the package is
// for, and go doc shows nothing without it.
func TestPackageComments(t *testing.T) {
	root := moduleRoot(t)
	missing, err := packagesWithoutDoc(root, []string{"internal", "cmd"})
	if err != nil {
		t.Fatalf("scanning packages: %v", err)
	}
	for _, dir := range missing {
		t.Errorf("%s: no package comment; add a `// Package x …` (or `// Command x …`) comment above the package clause in one file, e.g. doc.go", dir)
	}
}

// TestPackagesWithoutDocFindsOne proves the check can fail: a package with
// only an undocumented file is reported, a documented one is not, and a
// directory with only tests is not a package.
func TestPackagesWithoutDocFindsOne(t *testing.T) {
	base := t.TempDir()
	files := map[string]string{
		"internal/bare/a.go":          "package bare\n",
		"internal/bare/b.go":          "// Not a doc comment: a blank line follows.\n\npackage bare\n",
		"internal/good/a.go":          "package good\n",
		"internal/good/doc.go":        "// Package good is documented.\npackage good\n",
		"internal/tests/x_test.go":    "package tests\n",
		"internal/good/testdata/c.go": "package c\n",
		"cmd/tool/main.go":            "// Command tool does things.\npackage main\n",
	}
	for name, body := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing, err := packagesWithoutDoc(base, []string{"internal", "cmd"})
	if err != nil {
		t.Fatalf("scanning packages: %v", err)
	}
	want := []string{filepath.Join("internal", "bare")}
	if strings.Join(missing, ",") != strings.Join(want, ",") {
		t.Errorf("packagesWithoutDoc = %q, want %q", missing, want)
	}
}
