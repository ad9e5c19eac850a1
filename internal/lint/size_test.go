package lint

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The limits a newcomer can read a unit in (issue 15). Tests are exempt:
// a table-driven test is long because its table is.
const (
	maxFuncLines = 80
	maxFileLines = 500
)

// longUnits lists the non-test Go files over maxFileLines and the
// functions over maxFuncLines under base.
func longUnits(base string) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || (strings.HasPrefix(n, ".") && path != base) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, path)
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			out = append(out, fmt.Sprintf("%s: %d lines (at most %d)", rel, n, maxFileLines))
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				out = append(out, fmt.Sprintf("%s: func %s: %d lines (at most %d)", rel, fd.Name.Name, n, maxFuncLines))
			}
		}
		return nil
	})
	return out, err
}

// TestUnitsAreShort keeps every function of the module at most 80 lines
// and every file at most 500: split a long one into named steps.
func TestUnitsAreShort(t *testing.T) {
	long, err := longUnits(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range long {
		t.Error(l)
	}
}

// TestLongUnitsAreFound: the check sees a long function and a long file.
func TestLongUnitsAreFound(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("package p\n\nfunc long() {\n")
	for range maxFuncLines {
		b.WriteString("\t_ = 0\n")
	}
	b.WriteString("}\n")
	for i := range maxFileLines {
		fmt.Fprintf(&b, "var v%d = 0\n", i)
	}
	if err := writeFile(filepath.Join(dir, "p.go"), b.String()); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(filepath.Join(dir, "p_test.go"), "package p\n\nfunc TestLong() {\n"+strings.Repeat("\t_ = 0\n", 2*maxFuncLines)+"}\n"); err != nil {
		t.Fatal(err)
	}
	long, err := longUnits(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(long) != 2 || !strings.Contains(long[0], "p.go:") || !strings.Contains(long[1], "func long: 82 lines") {
		t.Errorf("found %q, want p.go's length and func long (and not the test)", long)
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }
