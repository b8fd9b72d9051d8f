package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// The library loads on a real server, and its functions are what FCALL
// finds: the scripts run as functions there, not by hash.
func TestScriptsRunAsFunctions(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	st := newRedisStore(c, 0, 0)
	l := newLocker(st, realClock{}, cfg)
	t.Cleanup(func() { _ = l.Close() })
	le, err := l.Acquire(t.Context(), "fn")
	if err != nil {
		t.Fatal(err)
	}
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st.scripts.noFunctions.Load() {
		t.Fatal("the store fell back to EVALSHA on a server with FUNCTION")
	}
	stats, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The first FCALL finds no library (failed_calls=1), loads it, and
	// sends again; the release is the third.
	for _, want := range []string{"cmdstat_fcall:calls=3,", "failed_calls=1", "cmdstat_function|load:calls=1,"} {
		if !strings.Contains(stats, want) {
			t.Errorf("commandstats lack %q:\n%s", want, stats)
		}
	}
	if strings.Contains(stats, "cmdstat_eval") {
		t.Errorf("EVALSHA was sent:\n%s", stats)
	}
}

// A client whose ACL denies FCALL but allows EVALSHA keeps working, by hash.
func TestScriptsFallBackWhenACLDeniesFunctions(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "on", "nopass", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "locker", "any" }) // nopass takes any
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	st := newRedisStore(c, 0, 0)
	l := newLocker(st, realClock{}, cfg)
	t.Cleanup(func() { _ = l.Close() })
	for range 2 {
		le, err := l.Acquire(t.Context(), "acl")
		if err != nil {
			t.Fatal(err)
		}
		if err := le.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if !st.scripts.noFunctions.Load() {
		t.Fatal("the store kept trying FCALL under an ACL that denies it")
	}

	// Renewals go by hash too, and survive a flushed script cache.
	le, err := l.Acquire(t.Context(), "acl-renewed", TTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.hb.renewals(le.h) < 2 {
		if le.Context().Err() != nil || time.Now().After(deadline) {
			t.Fatalf("lease not renewed by hash after SCRIPT FLUSH: %v", context.Cause(le.Context()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := le.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// The scripts name no channel and no publish command in their calls: they
// derive the channel from the lock key and take the command from the
// prelude. A release's message must still reach the channel keysFor names,
// by FCALL and by hash alike; and only a Cluster store's scripts use
// SPUBLISH.
func TestScriptsPublishOnTheLocksChannel(t *testing.T) {
	if strings.Count(preludeLua, publishLine) != 1 {
		t.Fatalf("prelude.lua must hold %q once, for newScripts to rewrite", publishLine)
	}
	if lib := newScripts(true).library; strings.Contains(lib, publishLine) || !strings.Contains(lib, "local PUBLISH = 'SPUBLISH'") {
		t.Error("a sharded library does not publish with SPUBLISH")
	}
	if lib := newScripts(false).library; !strings.Contains(lib, publishLine) {
		t.Error("a standalone library does not publish with PUBLISH")
	}
	srv := redistest.Start(t)
	c := srv.Client(t)
	for _, byHash := range []bool{false, true} {
		st := newRedisStore(c, 0, 0)
		st.scripts.noFunctions.Store(byHash)
		k := keysFor("guard:", "chan")
		ps := c.Subscribe(t.Context(), k.channel)
		if _, err := ps.Receive(t.Context()); err != nil { // the subscription's confirmation
			t.Fatal(err)
		}
		rep, err := st.acquire(t.Context(), k, acquireArgs{owner: "O1", ttl: 10 * time.Second, write: true, identity: "me"})
		if err != nil || !rep.acquired {
			t.Fatalf("by hash %v: acquire = %+v, %v", byHash, rep, err)
		}
		if res, err := st.setCounts(t.Context(), k, countArgs{owner: "O1", marker: time.Second}); err != nil || res != applied {
			t.Fatalf("by hash %v: release = %v, %v", byHash, res, err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		msg, err := ps.ReceiveMessage(ctx)
		cancel()
		if err != nil || msg.Payload != "free " {
			t.Fatalf("by hash %v: message on %s = %v, %v; want \"free \"", byHash, k.channel, msg, err)
		}
		_ = ps.Close()
	}
}
