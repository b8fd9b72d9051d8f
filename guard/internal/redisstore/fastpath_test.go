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
	"github.com/redis/go-redis/v9"
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

// A lone owner's final release on a key that acquisitions wait for also
// ends in the prelude (release_lone, then notify). It tells the waiters, and
// grants the key, exactly as the general path does, reached here through a
// MinHold that has passed.
func TestFastReleaseTellsWaitersAsTheGeneralPathDoes(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	s := New(c, Options{})
	ctx := t.Context()
	for _, tc := range []struct {
		name   string
		waiter store.AcquireArgs // zero Owner: nobody registers
		// prepare changes the state the release finds, after the
		// waiter registered.
		prepare func(k store.Keys)
	}{
		{"writer takes a grant", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2", Identity: "host b"}, nil},
		{"grant with MinHold and fence TTL", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2", MinHold: 7 * time.Second, FenceTTL: time.Minute}, nil},
		{"grant of what is left of a registration", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2"}, func(k store.Keys) {
			// Registered long ago: less than its TTL is left.
			c.ZIncrBy(ctx, k.Waiters, -float64((15 * time.Second).Milliseconds()), "locker-2 WAITER g 10000 0 0")
		}},
		{"reader is named", store.AcquireArgs{Owner: "WAITER", Waiter: "locker-2"}, nil},
		{"expired registration is swept", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2"}, func(k store.Keys) {
			c.ZAdd(ctx, k.Waiters, redis.Z{Score: 1, Member: "locker-2 WAITER g 10000 0 0"})
		}},
		{"queue gone, q left", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2"}, func(k store.Keys) {
			c.Del(ctx, k.Waiters)
		}},
		{"queue of another type", store.AcquireArgs{Owner: "WAITER", Write: true, Waiter: "locker-2"}, func(k store.Keys) {
			c.Del(ctx, k.Waiters)
			c.Set(ctx, k.Waiters, "not a queue", time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				published string
				fields    map[string]string
				queue     []string
				lockTTL   time.Duration
			}
			run := func(path string) outcome {
				k := store.KeysFor("guard:", path+"-"+tc.name)
				holder := store.AcquireArgs{Owner: "OWNER1", TTL: 20 * time.Second, Write: true}
				if rep, err := s.Acquire(ctx, k, holder); err != nil || !rep.Acquired {
					t.Fatalf("%s: holder: %+v, %v", path, rep, err)
				}
				w := tc.waiter
				w.TTL = 10 * time.Second
				if rep, err := s.Acquire(ctx, k, w); err != nil || rep.Acquired {
					t.Fatalf("%s: waiter: %+v, %v", path, rep, err)
				}
				if tc.prepare != nil {
					tc.prepare(k)
				}
				if path == "general" {
					c.HSet(ctx, k.Lock, "OWNER1:m", "1") // a MinHold that has passed
				}
				sub := c.Subscribe(ctx, k.Channel)
				defer sub.Close()
				if _, err := sub.Receive(ctx); err != nil {
					t.Fatal(err)
				}
				res, err := s.SetCounts(ctx, k, store.CountArgs{Owner: "OWNER1", Marker: 5 * time.Second})
				if err != nil || res != store.Applied {
					t.Fatalf("%s release: %v, %v", path, res, err)
				}
				if res, err := s.SetCounts(ctx, k, store.CountArgs{Owner: "OWNER1", Marker: 5 * time.Second}); err != nil || res != store.Applied {
					t.Fatalf("%s retried release: %v, %v", path, res, err)
				}
				msg, err := sub.ReceiveTimeout(ctx, 5*time.Second)
				m, ok := msg.(*redis.Message)
				if !ok {
					t.Fatalf("%s: no release notice: %v, %v", path, msg, err)
				}
				var o outcome
				o.fields = c.HGetAll(ctx, k.Lock).Val()
				// The grant's token is the counter's, which differs by path.
				if tok, ok := o.fields["WAITER:t"]; ok {
					if fence := c.Get(ctx, k.Fence).Val(); fence != tok {
						t.Errorf("%s: granted token %s, counter %s", path, tok, fence)
					}
					if !strings.Contains(m.Payload, " "+tok+" ") {
						t.Errorf("%s: grant %q does not carry the token %s", path, m.Payload, tok)
					}
					o.fields["WAITER:t"] = "<token>"
					m.Payload = strings.Replace(m.Payload, " "+tok+" ", " <token> ", 1)
				}
				if keep, ok := o.fields["WAITER:m"]; ok {
					if at, _ := strconv.ParseInt(keep, 10, 64); time.Until(time.UnixMilli(at)) <= 5*time.Second {
						t.Errorf("%s: MinHold until %s", path, keep)
					}
					o.fields["WAITER:m"] = "<MinHold>"
				}
				// The left of a registration: whole seconds, as it is not exact.
				o.published = m.Payload
				if f := strings.Fields(m.Payload); f[0] == "grant" {
					left, _ := strconv.Atoi(f[len(f)-1])
					o.published = strings.Join(f[:len(f)-1], " ") + " ~" + strconv.Itoa((left+500)/1000) + "s"
				}
				o.queue = c.ZRange(ctx, k.Waiters, 0, -1).Val()
				o.lockTTL = c.PTTL(ctx, k.Lock).Val().Round(time.Second)
				return o
			}
			fast, general := run("fast"), run("general")
			if fast.published != general.published {
				t.Errorf("published:\nfast path    %q\ngeneral path %q", fast.published, general.published)
			}
			if !maps.Equal(fast.fields, general.fields) {
				t.Errorf("fields after the release:\nfast path    %v\ngeneral path %v", fast.fields, general.fields)
			}
			if !slices.Equal(fast.queue, general.queue) {
				t.Errorf("queue after the release:\nfast path    %v\ngeneral path %v", fast.queue, general.queue)
			}
			if fast.lockTTL != general.lockTTL {
				t.Errorf("lock TTL after the release: fast path %v, general path %v", fast.lockTTL, general.lockTTL)
			}
			t.Logf("published %q, fields %v, queue %v, lock TTL %v", fast.published, fast.fields, fast.queue, fast.lockTTL)
		})
	}
}
