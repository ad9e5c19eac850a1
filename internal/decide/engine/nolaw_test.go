package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

// TestEngineAssertsNoController: the law lives in control.Loop, whole.
// An engine that asks its controller what it can do (a type assertion
// or type switch to a type of package control) is growing a second home
// for the law, whose rules a law that fails the assertion skips
// silently. Add a rule to the loop, and to its table of laws, instead.
func TestEngineAssertsNoController(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var typ ast.Expr
			switch x := n.(type) {
			case *ast.TypeAssertExpr:
				typ = x.Type
			case *ast.CaseClause:
				for _, e := range x.List {
					if fromControl(e) {
						t.Errorf("%s: a type switch on a type of package control", fset.Position(e.Pos()))
					}
				}
			}
			if typ != nil && fromControl(typ) {
				t.Errorf("%s: a type assertion to a type of package control", fset.Position(typ.Pos()))
			}
			return true
		})
	}
}

// fromControl reports whether e names a type of package control (T or *T).
func fromControl(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "control"
}
