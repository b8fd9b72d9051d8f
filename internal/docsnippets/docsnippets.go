// Package docsnippets keeps the Go snippets of README.md and docs/ equal to
// the bodies of Example functions, so that every snippet a reader copies
// compiles and runs in the test suite.
//
// A snippet is a code fence whose language is Go, preceded by a marker
// naming its Example:
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
// Fences are read as CommonMark reads them: a run of at least three
// backticks or tildes, indented by at most three spaces, closed by a run of
// the same character at least as long, or by the end of the document. The
// fence's language is the leading letters of its info string, in any case,
// so ```Go, ~~~golang, ``` go and ````go{1} are Go snippets too. Lines
// inside a fence are content: a ```go line in a ````markdown fence is not a
// snippet, and a marker there marks nothing. Fences inside block quotes and
// list items indented by four spaces or more are not recognized.
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

// Rewrite returns doc with every marked Go fence's content replaced by its
// Example's body, read from the packages under root; the fence lines stay
// as written. It fails on a Go fence without a marker on the line above, a
// marker without a Go fence on the line below, a marked fence that is never
// closed or that the body would close, and an Example that is missing or
// has no Output comment. Errors name the line as name:line.
func Rewrite(root, name string, doc []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(doc), "\n")
	var out strings.Builder
	var errs []error
	var marker []string // the marker on the line before, if any
	for i := 0; i < len(lines); i++ {
		f, ok := openingFence(lines[i])
		if !ok {
			if marker != nil {
				errs = append(errs, fmt.Errorf("%s:%d: the example marker must be followed by a ```go line", name, i))
			}
			marker = markerLine.FindStringSubmatch(strings.TrimSpace(lines[i]))
			out.WriteString(lines[i])
			continue
		}
		end := i + 1
		for end < len(lines) && !f.closedBy(lines[end]) {
			end++
		}
		content := strings.Join(lines[i+1:min(end, len(lines))], "")
		switch {
		case !f.isGo() && marker != nil:
			errs = append(errs, fmt.Errorf("%s:%d: the example marker must be followed by a ```go line", name, i))
		case !f.isGo():
		case marker == nil:
			errs = append(errs, fmt.Errorf("%s:%d: a go snippet without an <!-- example: DIR ExampleName --> line above it: make it an Example", name, i+1))
		case end == len(lines):
			errs = append(errs, fmt.Errorf("%s:%d: the go snippet is never closed", name, i+1))
		default:
			body, err := fenceBody(f, filepath.Join(root, filepath.FromSlash(marker[1])), marker[2])
			if err != nil {
				errs = append(errs, fmt.Errorf("%s:%d: %w", name, i, err))
				break
			}
			content = body
		}
		out.WriteString(lines[i])
		out.WriteString(content)
		if end < len(lines) {
			out.WriteString(lines[end])
		}
		marker = nil
		i = end
	}
	if marker != nil {
		errs = append(errs, fmt.Errorf("%s:%d: the example marker must be followed by a ```go line", name, len(lines)))
	}
	return []byte(out.String()), errors.Join(errs...)
}

// fence is an opening code fence, as CommonMark reads it.
type fence struct {
	indent int    // spaces before the run: 0 to 3
	char   byte   // '`' or '~'
	length int    // of the run: 3 or more
	info   string // what follows the run, trimmed
}

// openingFence reports whether line opens a code fence, and which.
func openingFence(line string) (fence, bool) {
	indent, rest := indentation(line)
	if indent > 3 || rest == "" || (rest[0] != '`' && rest[0] != '~') {
		return fence{}, false
	}
	f := fence{indent: indent, char: rest[0], length: len(rest) - len(strings.TrimLeft(rest, rest[:1]))}
	f.info = strings.TrimSpace(rest[f.length:])
	if f.length < 3 || (f.char == '`' && strings.Contains(f.info, "`")) {
		return fence{}, false
	}
	return f, true
}

// closedBy reports whether line closes f: at most three spaces, a run of
// f's character at least as long as f's, then only spaces and tabs.
func (f fence) closedBy(line string) bool {
	indent, rest := indentation(line)
	run := len(rest) - len(strings.TrimLeft(rest, string(f.char)))
	return indent <= 3 && run >= f.length && strings.Trim(rest[run:], " \t") == ""
}

// isGo reports whether f's language, the leading letters of its info
// string in any case, is go or golang: ```Go, ``` go and ```go{1} are Go.
func (f fence) isGo() bool {
	lang := f.info
	if end := strings.IndexFunc(lang, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') }); end >= 0 {
		lang = lang[:end]
	}
	lang = strings.ToLower(lang)
	return lang == "go" || lang == "golang"
}

// indentation splits line, without its line ending, into the count of its
// leading spaces and the rest.
func indentation(line string) (int, string) {
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	rest := strings.TrimLeft(line, " ")
	return len(line) - len(rest), rest
}

// fenceBody returns the content of f for the snippet that name stands for
// in dir, each line indented as f is, so that it reads as the snippet. It
// fails when a line of the snippet would close f.
func fenceBody(f fence, dir, name string) (string, error) {
	body, err := snippetOf(dir, name)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(body, "\n") {
		if line != "\n" && line != "" {
			line = strings.Repeat(" ", f.indent) + line
		}
		if f.closedBy(line) {
			return "", fmt.Errorf("the line %q of %s would close the fence: open it with a longer run of %c", strings.TrimSpace(line), name, f.char)
		}
		b.WriteString(line)
	}
	return b.String(), nil
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
