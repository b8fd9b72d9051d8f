package httpguard_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// The Type constants are written out as literal strings, so that go doc and
// pkg.go.dev show each one's full URI rather than an expression.
func TestProblemTypesAreLiterals(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "problem.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://pkg.go.dev/github.com/jobguard/jobguard/httpguard#"
	found := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !name.IsExported() || !strings.HasPrefix(name.Name, "Type") {
					continue
				}
				found++
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s is not a literal string", name.Name)
					continue
				}
				if v, _ := strconv.Unquote(lit.Value); v != base+name.Name {
					t.Errorf("%s = %s, want %q", name.Name, lit.Value, base+name.Name)
				}
			}
		}
	}
	if found != 8 {
		t.Errorf("%d Type constants, want 8", found)
	}
}
