// Package docsnippets keeps the Go snippets of README.md and docs/ equal to
// the bodies of Example functions, so that every snippet a reader copies
// compiles and runs in the test suite.
//
// A snippet is a ```go fence preceded by a marker naming its Example:
//
//	<!-- example: guard Example_wait -->
//	```go
//	...
//	```
//
// The first word is the package's directory from the module root, the
// second the Example function in one of its _test.go files. The fence holds
// the function's body, one tab less indented, without the lines that end in
// the comment //docs:hide (the embedded Redis an example starts, say). An
// Example used as a snippet must have an "// Output:" comment, so that
// go test runs it and checks what it prints.
//
// The second word may instead name a type declared in the test files (one
// an Example uses): the fence then holds the type's declaration, with its
// doc comment, and its methods.
//
// Run go test ./internal/docsnippets -update to rewrite the fences.
package docsnippets

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// hideMarker ends a line of an Example that the docs leave out.
const hideMarker = "//docs:hide"

var markerLine = regexp.MustCompile(`^<!--\s*example:\s*(\S+)\s+(\w+)\s*-->\s*$`)

// Rewrite returns doc with every marked ```go fence replaced by its
// Example's body, read from the packages under root. It fails on a ```go
// fence without a marker, a marker without a fence, and an Example that is
// missing or has no Output comment.
func Rewrite(root, name string, doc []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	var out strings.Builder
	var errs []error
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		m := markerLine.FindStringSubmatch(trimmed)
		if m == nil {
			if isGoFence(trimmed) {
				errs = append(errs, fmt.Errorf("%s:%d: a go snippet without an <!-- example: DIR ExampleName --> line above it: make it an Example", name, i+1))
			}
			out.WriteString(line)
			continue
		}
		out.WriteString(line)
		if i+1 >= len(lines) || !isGoFence(strings.TrimSpace(lines[i+1])) {
			errs = append(errs, fmt.Errorf("%s:%d: the example marker must be followed by a ```go line", name, i+1))
			continue
		}
		end := i + 2
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			errs = append(errs, fmt.Errorf("%s:%d: the go snippet is never closed", name, i+2))
			continue
		}
		body, err := snippetOf(filepath.Join(root, filepath.FromSlash(m[1])), m[2])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", name, i+1, err))
			body = strings.Join(lines[i+2:end], "")
		}
		out.WriteString(lines[i+1])
		out.WriteString(body)
		out.WriteString(lines[end])
		i = end
	}
	return []byte(out.String()), errors.Join(errs...)
}

func isGoFence(line string) bool {
	return line == "```go" || strings.HasPrefix(line, "```go ")
}

// snippetOf returns the snippet that name stands for in dir's test files:
// an Example's body, or a type's declaration and methods.
func snippetOf(dir, name string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	var decl strings.Builder
	for _, path := range files {
		src, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			return "", err
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == name && strings.HasPrefix(name, "Example") && d.Body != nil {
					if !hasOutput(f, d) {
						return "", fmt.Errorf("%s in %s has no // Output: comment, so go test would compile it but not run it", name, path)
					}
					open := fset.Position(d.Body.Lbrace).Offset
					closing := fset.Position(d.Body.Rbrace).Offset
					return snippet(src[open+1 : closing]), nil
				}
				if d.Recv != nil && len(d.Recv.List) == 1 && receiverType(d.Recv.List[0].Type) == name {
					writeDecl(&decl, fset, src, d.Doc, d)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && ts.Name.Name == name && d.Tok == token.TYPE {
						writeDecl(&decl, fset, src, d.Doc, d)
					}
				}
			}
		}
	}
	if decl.Len() > 0 {
		return decl.String(), nil
	}
	return "", fmt.Errorf("no Example or type %s in %s", name, filepath.Join(dir, "*_test.go"))
}

// writeDecl appends node's source, with its doc comment, to b.
func writeDecl(b *strings.Builder, fset *token.FileSet, src []byte, doc *ast.CommentGroup, node ast.Node) {
	start := node.Pos()
	if doc != nil {
		start = doc.Pos()
	}
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	b.Write(src[fset.Position(start).Offset:fset.Position(node.End()).Offset])
	b.WriteByte('\n')
}

// receiverType returns the name of a method's receiver type.
func receiverType(e ast.Expr) string {
	if star, ok := e.(*ast.StarExpr); ok {
		e = star.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// hasOutput reports whether fd's body holds an Output comment, as go test
// requires to run an Example.
func hasOutput(f *ast.File, fd *ast.FuncDecl) bool {
	for _, cg := range f.Comments {
		if cg.Pos() < fd.Body.Lbrace || cg.End() > fd.Body.Rbrace {
			continue
		}
		text := strings.TrimSpace(cg.Text())
		if strings.HasPrefix(text, "Output:") || strings.HasPrefix(text, "Unordered output:") {
			return true
		}
	}
	return false
}

func snippet(body []byte) string {
	var b bytes.Buffer
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasSuffix(strings.TrimRight(line, " \t"), hideMarker) {
			continue
		}
		b.WriteString(strings.TrimPrefix(line, "\t"))
		b.WriteByte('\n')
	}
	return strings.Trim(b.String(), "\n") + "\n"
}
