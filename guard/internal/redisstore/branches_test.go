package redisstore

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxBranches is the most branches (if, elseif, and, or, for, while) one
// body of a script may take: the top-level body and each function
// apiece. A body with more is hard to read and to test; split it into
// functions that each say what they decide.
const maxBranches = 15

// No script body carries more than maxBranches branches.
func TestScriptBranches(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("scripts", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for body, n := range luaBranches(string(b)) {
			t.Logf("%s %s: %d branches", filepath.Base(f), body, n)
			if n > maxBranches {
				t.Errorf("%s: %s takes %d branches, more than %d: split it into functions", filepath.Base(f), body, n, maxBranches)
			}
		}
	}
}

// The counter counts what it should: each kind of branch, in the body that
// holds it, through nested blocks, strings and comments.
func TestLuaBranchesCounts(t *testing.T) {
	src := `
local x = 'if and or' -- if and or
--[[ while for ]]
local function f(a)
  if a and b then return 1 elseif c or d then return 2 end
  for i = 1, 2 do while true do break end end
  local g = function() if a then end end
  return [[and]]
end
if x then repeat x = 1 until x end
`
	got := luaBranches(src)
	want := map[string]int{"<top>": 1, "f": 6, "<anonymous>": 1}
	for body, n := range want {
		if got[body] != n {
			t.Errorf("%s: %d branches, want %d (all: %v)", body, got[body], n, got)
		}
	}
}

var luaName = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// luaBranches counts the branches of each body of a Lua source: the
// top-level one ("<top>") and each function's, by name ("<anonymous>" for
// a function expression).
func luaBranches(src string) map[string]int {
	code := luaCode(src)
	spans := luaName.FindAllStringIndex(code, -1)
	counts := map[string]int{"<top>": 0}
	var stack []string // the open blocks: a function's name, or "" for another block
	body := func() string {
		for i := len(stack) - 1; i >= 0; i-- {
			if stack[i] != "" {
				return stack[i]
			}
		}
		return "<top>"
	}
	for i, sp := range spans {
		switch w := code[sp[0]:sp[1]]; w {
		case "function":
			// A statement names its function: "function name(".
			name := "<anonymous>"
			if i+1 < len(spans) && strings.TrimSpace(code[sp[1]:spans[i+1][0]]) == "" &&
				strings.HasPrefix(strings.TrimLeft(code[spans[i+1][1]:], " "), "(") {
				name = code[spans[i+1][0]:spans[i+1][1]]
			}
			stack = append(stack, name)
			counts[name] += 0
		case "if":
			counts[body()]++
			stack = append(stack, "")
		case "elseif", "and", "or", "for", "while":
			counts[body()]++
		case "do", "repeat":
			stack = append(stack, "")
		case "end", "until":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	return counts
}

// luaCode returns src without comments and with every string literal
// replaced by a space, so that only code is counted.
func luaCode(src string) string {
	var out strings.Builder
	for i := 0; i < len(src); {
		switch {
		case strings.HasPrefix(src[i:], "--[["):
			end := strings.Index(src[i:], "]]")
			if end < 0 {
				return out.String()
			}
			i += end + 2
		case strings.HasPrefix(src[i:], "--"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				return out.String()
			}
			i += end
		case src[i] == '\'' || src[i] == '"':
			q := src[i]
			for i++; i < len(src) && src[i] != q; i++ {
				if src[i] == '\\' {
					i++
				}
			}
			i++
			out.WriteByte(' ')
		case strings.HasPrefix(src[i:], "[["):
			end := strings.Index(src[i:], "]]")
			if end < 0 {
				return out.String()
			}
			i += end + 2
			out.WriteByte(' ')
		default:
			out.WriteByte(src[i])
			i++
		}
	}
	return out.String()
}
