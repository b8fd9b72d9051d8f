package report

import (
	"fmt"
	"slices"
	"strings"
)

// table is a Markdown table built row by row. The first column is
// left-aligned, the others right-aligned (numbers) unless named in left.
type table struct {
	head []string
	rows [][]string
	left []int // columns of text, left-aligned
}

func newTable(head ...string) *table { return &table{head: head} }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// write writes the table to b.
func (t *table) write(b *strings.Builder) {
	line := func(cells []string) {
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	line(t.head)
	align := make([]string, len(t.head))
	for i := range align {
		align[i] = "---:"
		if i == 0 || slices.Contains(t.left, i) {
			align[i] = "---"
		}
	}
	line(align)
	for _, r := range t.rows {
		line(r)
	}
	b.WriteString("\n")
}

// num formats a number with the given decimals and thousands separators.
func num(v float64, decimals int) string {
	s := fmt.Sprintf("%.*f", decimals, v)
	intPart, frac, _ := strings.Cut(s, ".")
	neg := strings.HasPrefix(intPart, "-")
	intPart = strings.TrimPrefix(intPart, "-")
	var out []byte
	for i := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, intPart[i])
	}
	s = string(out)
	if neg {
		s = "-" + s
	}
	if frac != "" {
		s += "." + frac
	}
	return s
}

// ratio formats a ratio as "1.23×".
func ratio(v float64) string { return fmt.Sprintf("%.2f×", v) }

// count formats an integer count.
func count[T ~int | ~int64](v T) string { return num(float64(v), 0) }
