package redisstore

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/redistest"
)

// acquire.lua and set_counts.lua end their common cases early, in the
// prelude's take_free and release_lone. Each writes what the scripts'
// general path writes in the same case, reached here through a state the
// fast paths leave to it: a lock key whose only holder has expired (the
// sweep deletes it, and the key is free again), and a hold whose MinHold
// has passed.
func TestFastPathsWriteWhatTheGeneralPathsWrite(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(c, Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		args store.AcquireArgs
	}{
		{"write", store.AcquireArgs{Write: true}},
		{"read", store.AcquireArgs{}},
		{"permit", store.AcquireArgs{Write: true, Permits: 3}},
		{"waiter with identity", store.AcquireArgs{Write: true, Waiter: "locker-1", Identity: "host-a"}},
		{"fence TTL", store.AcquireArgs{Write: true, FenceTTL: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.args
			a.Owner, a.TTL = "OWNER1", 12345*time.Millisecond
			state := func(path string) (map[string]string, []string) {
				k := store.KeysFor("guard:", path+"-"+tc.name)
				if path == "general" {
					// A holder that expired long ago, on the key.
					c.HSet(ctx, k.Lock, "DEAD:t", "1", "DEAD:x", "1", "DEAD", "1", "writer", "DEAD", "DEAD:i", "")
					c.PExpire(ctx, k.Lock, time.Minute)
				}
				rep, err := s.Acquire(ctx, k, a)
				if err != nil || !rep.Acquired || rep.Token <= 0 {
					t.Fatalf("%s acquisition: %+v, %v", path, rep, err)
				}
				fields, err := c.HGetAll(ctx, k.Lock).Result()
				if err != nil {
					t.Fatal(err)
				}
				if fields["OWNER1:t"] != strconv.FormatInt(rep.Token, 10) {
					t.Fatalf("%s: token field %q, reply %d", path, fields["OWNER1:t"], rep.Token)
				}
				fields["OWNER1:t"] = "<token>"
				if ttl := c.PTTL(ctx, k.Lock).Val(); ttl <= 12*time.Second || ttl > a.TTL {
					t.Errorf("%s: the lock's TTL %v, want %v", path, ttl, a.TTL)
				}
				// The counter is permanent, or lives FenceTTL from its first token.
				switch ttl := c.PTTL(ctx, k.Fence).Val(); {
				case a.FenceTTL == 0 && ttl != -1:
					t.Errorf("%s: the counter's TTL %v, want none", path, ttl)
				case a.FenceTTL > 0 && (ttl <= a.FenceTTL-5*time.Second || ttl > a.FenceTTL):
					t.Errorf("%s: the counter's TTL %v, want %v", path, ttl, a.FenceTTL)
				}
				if path == "general" {
					// MinHold that has passed sends the release down the general path.
					c.HSet(ctx, k.Lock, "OWNER1:m", "1")
				}
				res, err := s.SetCounts(ctx, k, store.CountArgs{Owner: a.Owner, Marker: 5 * time.Second})
				if err != nil || res != store.Applied {
					t.Fatalf("%s release: %v, %v", path, res, err)
				}
				// A retry of the release knows it applied.
				if res, err := s.SetCounts(ctx, k, store.CountArgs{Owner: a.Owner, Marker: 5 * time.Second}); err != nil || res != store.Applied {
					t.Fatalf("%s retried release: %v, %v", path, res, err)
				}
				left, err := c.Keys(ctx, "guard:{"+path+"-"+tc.name+"}*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for i, key := range left {
					left[i] = strings.Replace(key, path, "<path>", 1)
					if ttl := c.PTTL(ctx, key).Val(); strings.Contains(key, ":released") && (ttl <= 0 || ttl > 5*time.Second) {
						t.Errorf("%s: release marker %s TTL %v, want up to 5s", path, key, ttl)
					}
				}
				slices.Sort(left)
				return fields, left
			}
			fastFields, fastLeft := state("fast")
			genFields, genLeft := state("general")
			if !maps.Equal(fastFields, genFields) {
				t.Errorf("fields of a hold:\nfast path    %v\ngeneral path %v", fastFields, genFields)
			}
			if !slices.Equal(fastLeft, genLeft) {
				t.Errorf("keys after the release:\nfast path    %v\ngeneral path %v", fastLeft, genLeft)
			}
		})
	}
}
