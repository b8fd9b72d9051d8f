package redisstore

import (
	"context"
	"encoding"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
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
		got := fmt.Sprint(a) // as a hook that prints the command does
		if m, ok := a.(encoding.BinaryMarshaler); ok {
			b, _ := m.MarshalBinary() // as go-redis writes it
			if string(b) != got {
				t.Errorf("argument %d is written as %q, printed as %q", i, b, got)
			}
		}
		if got != want[i] {
			t.Errorf("argument %d = %q, want %q", i, got, want[i])
		}
	}
}

// A command guard sends, printed by a go-redis hook (Cmd.String, as a
// logging or tracing hook does), shows its keys and arguments, not the
// addresses of argv's copies; and the server gets the same values.
func TestCommandPrintsItsValues(t *testing.T) {
	srv := redistest.Start(t)
	var printed []string
	client := srv.Client(t)
	client.AddHook(printHook{&printed})
	s := New(client, Options{})
	k := store.KeysFor("guard:", "printed")
	if _, err := s.Acquire(t.Context(), k, store.AcquireArgs{Owner: "owner-1", TTL: 12345 * time.Millisecond, Write: true, Identity: "host-a"}); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, p := range printed {
		if strings.Contains(p, "acquire") {
			line = p
		}
	}
	for _, want := range []string{k.Lock, k.Fence, "owner-1", "12345", "host-a"} {
		if !strings.Contains(line, want) {
			t.Errorf("printed %q: want %q in it", line, want)
		}
	}
	if strings.Contains(line, "0xc") {
		t.Errorf("printed %q: an address", line)
	}
	ttl, err := client.PTTL(t.Context(), k.Lock).Result()
	if err != nil || ttl <= 12*time.Second || ttl > 12345*time.Millisecond {
		t.Errorf("the lock's TTL on the server: %v, %v; want 12.345s", ttl, err)
	}
}

type printHook struct{ printed *[]string }

func (printHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h printHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*h.printed = append(*h.printed, cmd.String())
		return next(ctx, cmd)
	}
}
func (h printHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
