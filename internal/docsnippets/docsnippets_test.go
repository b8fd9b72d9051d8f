package docsnippets

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the snippets of README.md and docs/ from their Examples")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDocsSnippetsAreExamples fails when a Go snippet of README.md or docs/
// is not the body of the Example it names, or names none.
func TestDocsSnippetsAreExamples(t *testing.T) {
	root := filepath.Join("..", "..")
	docs := docFiles(t, root)
	snippets := 0
	for _, path := range docs {
		name, _ := filepath.Rel(root, path)
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		snippets += strings.Count(string(doc), "<!-- example:")
		got, err := Rewrite(root, filepath.ToSlash(name), doc)
		if err != nil {
			t.Error(err)
			continue
		}
		if string(got) == string(doc) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: a snippet differs from its Example: run go test ./internal/docsnippets -update", name)
	}
	if snippets == 0 {
		t.Fatal("found no snippets in README.md and docs/: is the test looking in the module root?")
	}
}

// docFiles returns README.md and every .md file under docs/, at any depth.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	docs := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func TestRewrite(t *testing.T) {
	type testCase struct {
		name, doc, want, err string
	}
	cases := []testCase{{
		name: "a marked fence takes the Example's body, hidden lines left out",
		doc:  "intro\n<!-- example: pkg ExampleShown -->\n```go\nstale\n```\nafter\n",
		want: "intro\n<!-- example: pkg ExampleShown -->\n```go\nfmt.Println(\"hello\")\n// Output: hello\n```\nafter\n",
	}, {
		name: "a fence without a marker is refused",
		doc:  "```go\nx := 1\n```\n",
		want: "```go\nx := 1\n```\n",
		err:  "a.md:1: a go snippet without",
	}, {
		name: "an Example that go test would not run is refused",
		doc:  "<!-- example: pkg ExampleCompiledOnly -->\n```go\n```\n",
		want: "<!-- example: pkg ExampleCompiledOnly -->\n```go\n```\n",
		err:  "has no // Output: comment",
	}, {
		name: "a missing Example is refused",
		doc:  "<!-- example: pkg ExampleGone -->\n```go\n```\n",
		want: "<!-- example: pkg ExampleGone -->\n```go\n```\n",
		err:  "no Example or type ExampleGone",
	}, {
		name: "a marker needs a fence",
		doc:  "<!-- example: pkg ExampleShown -->\ntext\n",
		want: "<!-- example: pkg ExampleShown -->\ntext\n",
		err:  "must be followed by a ```go line",
	}, {
		name: "a type stands for its declaration and methods",
		doc:  "<!-- example: pkg greeter -->\n```go\n```\n",
		want: "<!-- example: pkg greeter -->\n```go\n// greeter says hello.\ntype greeter struct{}\n\nfunc (greeter) Hello() string { return \"hello\" }\n\nfunc (*greeter) Bye() string { return \"bye\" }\n```\n",
	}, {
		name: "other fences are left alone",
		doc:  "```sh\ngo run ./x\n```\n",
		want: "```sh\ngo run ./x\n```\n",
	}, {
		name: "a go line inside a longer fence is content, not a snippet",
		doc:  "````markdown\n```go\nx := 1\n```\n````\n",
		want: "````markdown\n```go\nx := 1\n```\n````\n",
	}, {
		name: "a marker inside a fence marks nothing",
		doc:  "````markdown\n<!-- example: pkg ExampleGone -->\n```go\n```\n````\n",
		want: "````markdown\n<!-- example: pkg ExampleGone -->\n```go\n```\n````\n",
	}, {
		name: "a fence is read to its end before the next snippet",
		doc:  "````markdown\n```go\n```\n````\n\n```go\nx := 1\n```\n",
		want: "````markdown\n```go\n```\n````\n\n```go\nx := 1\n```\n",
		err:  "a.md:6: a go snippet without",
	}, {
		name: "backticks do not close a tilde fence",
		doc:  "<!-- example: pkg ExampleShown -->\n~~~go\nstale\n```\nstale\n~~~\n",
		want: "<!-- example: pkg ExampleShown -->\n~~~go\nfmt.Println(\"hello\")\n// Output: hello\n~~~\n",
	}, {
		name: "a go line inside an unclosed tilde fence is content",
		doc:  "~~~text\n```\n```go\nx := 1\n```\n",
		want: "~~~text\n```\n```go\nx := 1\n```\n",
	}, {
		name: "a closing line with text after the run does not close",
		doc:  "<!-- example: pkg ExampleShown -->\n```go\n``` x\n```\n",
		want: "<!-- example: pkg ExampleShown -->\n```go\nfmt.Println(\"hello\")\n// Output: hello\n```\n",
	}, {
		name: "an indented fence is a snippet, its content indented as the fence",
		doc:  "1. Run:\n\n   <!-- example: pkg ExampleShown -->\n   ```go\n   stale\n   ```\n",
		want: "1. Run:\n\n   <!-- example: pkg ExampleShown -->\n   ```go\n   fmt.Println(\"hello\")\n   // Output: hello\n   ```\n",
	}, {
		name: "an unmarked indented fence is refused",
		doc:  "   ```go\n   x := 1\n   ```\n",
		want: "   ```go\n   x := 1\n   ```\n",
		err:  "a.md:1: a go snippet without",
	}, {
		name: "four spaces make an indented code block, not a fence",
		doc:  "    ```go\n    x := 1\n    ```\n",
		want: "    ```go\n    x := 1\n    ```\n",
	}, {
		name: "a backtick in a backtick fence's info string makes it no fence",
		doc:  "```go` is not a fence\n",
		want: "```go` is not a fence\n",
	}, {
		name: "an unclosed snippet is refused",
		doc:  "<!-- example: pkg ExampleShown -->\n```go\nstale\n",
		want: "<!-- example: pkg ExampleShown -->\n```go\nstale\n",
		err:  "a.md:2: the go snippet is never closed",
	}, {
		name: "an unmarked unclosed fence is refused",
		doc:  "text\n~~~go\nx := 1\n",
		want: "text\n~~~go\nx := 1\n",
		err:  "a.md:2: a go snippet without",
	}, {
		name: "a marker before a fence in another language is refused",
		doc:  "<!-- example: pkg ExampleShown -->\n```sh\ngo run ./x\n```\n",
		want: "<!-- example: pkg ExampleShown -->\n```sh\ngo run ./x\n```\n",
		err:  "a.md:1: the example marker must be followed by a ```go line",
	}, {
		name: "a body line that would close the fence is refused",
		doc:  "<!-- example: pkg ExampleTildes -->\n~~~go\n~~~\n",
		want: "<!-- example: pkg ExampleTildes -->\n~~~go\n~~~\n",
		err:  "a.md:1: the line \"~~~\" of ExampleTildes would close the fence",
	}, {
		name: "a body line of the other fence character is content",
		doc:  "<!-- example: pkg ExampleTildes -->\n```go\n```\n",
		want: "<!-- example: pkg ExampleTildes -->\n```go\nfmt.Print(`a\n~~~\n`)\n// Output:\n// a\n// ~~~\n```\n",
	}}
	// Each way of writing a Go fence is a snippet: refused unmarked,
	// rewritten marked, its fence lines kept as written.
	for _, fence := range []struct{ open, close string }{
		{"```go", "```"},
		{"```Go", "```"},
		{"```golang", "```"},
		{"~~~go", "~~~"},
		{"``` go", "```"},
		{"````go", "````"},
		{"```go{1}", "```"},
		{"```go title=main.go", "```"},
	} {
		doc := fence.open + "\nx := 1\n" + fence.close + "\n"
		marker := "<!-- example: pkg ExampleShown -->\n"
		cases = append(cases, testCase{
			name: "unmarked " + fence.open + " is refused",
			doc:  "intro\n" + doc,
			want: "intro\n" + doc,
			err:  "a.md:2: a go snippet without",
		}, testCase{
			name: "marked " + fence.open + " is rewritten",
			doc:  marker + doc,
			want: marker + fence.open + "\nfmt.Println(\"hello\")\n// Output: hello\n" + fence.close + "\n",
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Rewrite("testdata", "a.md", []byte(tc.doc))
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// TestDocsNameTestsThatExist fails when README.md or docs/ names a test
// (a promise's proof) that no _test.go file declares, or a subtest whose
// name no _test.go file spells.
func TestDocsNameTestsThatExist(t *testing.T) {
	root := filepath.Join("..", "..")
	var sources strings.Builder
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := sources.String()
	docs := docFiles(t, root)
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Z][A-Za-z0-9_]*|…)((?:/[^`/]+)*)`")
	checked := 0
	for _, path := range docs {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, path)
		for _, m := range named.FindAllStringSubmatch(string(doc), -1) {
			if m[1] != "…" && !strings.Contains(src, "func "+m[1]+"(") {
				t.Errorf("%s names %s, which no _test.go declares", name, m[1])
			}
			for _, sub := range strings.Split(strings.TrimPrefix(m[2], "/"), "/") {
				if sub != "" && sub != "*" && !strings.Contains(src, `"`+sub+`"`) {
					t.Errorf("%s names the subtest %s of %s, which no _test.go spells", name, sub, m[0])
				}
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("found %d test names in README.md and docs/, want the promises' tests", checked)
	}
}
