package redisstore

import (
	"fmt"
	"testing"
	"time"
)

// An argv past the room of its arrays boxes what no longer fits: the line
// reads the same either way.
func TestArgvBeyondItsRoom(t *testing.T) {
	v := newArgv()
	var want []string
	for i := range 8 {
		k := fmt.Sprintf("key%d", i)
		v.key(k)
		want = append(want, k)
	}
	for i := range 6 {
		n := int64(1000 + i)
		v.int(n)
		want = append(want, fmt.Sprint(n))
	}
	v.int(7)
	v.ms(1500 * time.Microsecond)
	v.str("")
	v.lit("w")
	want = append(want, "7", "1", "", "w")

	c := v.call()
	if c.argv.keys != 8 {
		t.Fatalf("keys = %d, want 8", c.argv.keys)
	}
	line := c.argv.line[3:]
	if len(line) != len(want) {
		t.Fatalf("line has %d arguments, want %d", len(line), len(want))
	}
	for i, a := range line {
		var got string
		switch a := a.(type) {
		case *string:
			got = *a
		case *int64:
			got = fmt.Sprint(*a)
		default:
			got = fmt.Sprint(a)
		}
		if got != want[i] {
			t.Errorf("argument %d = %q, want %q", i, got, want[i])
		}
	}
}
