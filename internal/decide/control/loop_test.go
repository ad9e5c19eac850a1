package control

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLawRulesOnlyPID: the rules but the holds and armed pauses reach
// into pid's state, so the table gives them to pid alone, and NewLoop
// refuses a law that has them otherwise.
func TestLawRulesOnlyPID(t *testing.T) {
	for law, r := range LawRules {
		if law != "pid" && r.pidOnly() != (Rules{}) {
			t.Errorf("law %s runs switchable rules %+v", law, r)
		}
	}
	if err := CheckRules([]string{"armed", "nonsense"}); err == nil {
		t.Error("CheckRules accepted an unknown rule")
	}
}

// TestDescriptionCoversTheLaw: doc.go names every constant of the law
// and its table of rules is LawRules, so the description cannot fall
// behind the code unnoticed.
func TestDescriptionCoversTheLaw(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					switch {
					case strings.HasPrefix(id.Name, "Signal"), // names, not tuning
						strings.HasPrefix(id.Name, "Thesis"), // the listing's, see Thesis
						id.Name == "burstSlots":              // burstMemory's, derived
						continue
					}
					if !strings.Contains(text, id.Name) {
						t.Errorf("%s: constant %s is not in the description (doc.go)", fset.Position(id.Pos()), id.Name)
					}
				}
			}
		}
	}
	for law, rules := range LawRules {
		col := slices.Index([]string{"pid", "thesis", "none"}, law)
		if col < 0 {
			t.Errorf("law %s is not a column of doc.go's table", law)
			continue
		}
		for _, name := range RuleNames() {
			on := *ruleFields[name](&rules)
			row := ""
			for _, line := range strings.Split(text, "\n") {
				tab, ok := strings.CutPrefix(line, "//\t") // the table is indented
				if f := strings.Fields(tab); ok && len(f) > 3 && f[0] == name {
					row = line
					if want := map[bool]string{true: "on", false: "off"}[on]; f[1+col] != want {
						t.Errorf("doc.go's table: %s under %s is %s, LawRules says %s", name, law, f[1+col], want)
					}
				}
			}
			if row == "" {
				t.Errorf("rule %s has no row in doc.go's table", name)
			}
		}
	}
}
