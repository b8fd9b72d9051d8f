package report

import (
	"strings"
	"testing"
)

func TestNum(t *testing.T) {
	tests := []struct {
		v        float64
		decimals int
		want     string
	}{
		{0, 0, "0"},
		{999, 0, "999"},
		{1000, 0, "1,000"},
		{1234567.891, 2, "1,234,567.89"},
		{-12345, 1, "-12,345.0"},
		{0.5, 2, "0.50"},
	}
	for _, tt := range tests {
		if got := num(tt.v, tt.decimals); got != tt.want {
			t.Errorf("num(%v, %d) = %q, want %q", tt.v, tt.decimals, got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := newTable("library", "ops")
	tb.add("guard", "12")
	var b strings.Builder
	tb.write(&b)
	want := "| library | ops |\n| --- | ---: |\n| guard | 12 |\n\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
