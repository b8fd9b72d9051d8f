package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// ClaimFenced's script runs as a function of the guard library where the
// server has FUNCTION, and by hash where the client's ACL denies FCALL,
// also after the server's script cache was flushed (NOSCRIPT, then EVAL).
func TestClaimFencedScriptPaths(t *testing.T) {
	for _, tc := range []struct {
		name      string
		functions bool
	}{{"function", true}, {"by hash", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			c := admin
			if !tc.functions {
				if err := admin.Do(t.Context(), "ACL", "SETUSER", "locker", "on", "nopass", "~*", "&*", "+@all", "-fcall", "-function").Err(); err != nil {
					t.Fatal(err)
				}
				c = srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "locker", "any" })
			}
			cfg, err := newConfig(nil)
			if err != nil {
				t.Fatal(err)
			}
			st := newRedisStore(c, 0, 0)
			l := newLocker(st, realClock{}, cfg)
			t.Cleanup(func() { _ = l.Close() })
			le, err := l.Acquire(t.Context(), "paths")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = le.Release(t.Context()) }()
			if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := admin.ConfigResetStat(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := l.ClaimFenced(t.Context(), "paths", le.Token(), []byte("v"), time.Minute); err != nil {
				t.Fatalf("ClaimFenced: %v", err)
			}
			if err := l.ClaimFenced(t.Context(), "paths", le.Token()-1, []byte("stale"), time.Minute); err == nil {
				t.Fatal("an older token stored")
			}
			if v, ok, err := l.Claimed(t.Context(), "paths"); string(v) != "v" || !ok || err != nil {
				t.Fatalf("Claimed = %q, %v, %v", v, ok, err)
			}
			if st.scripts.noFunctions.Load() == tc.functions {
				t.Fatalf("noFunctions = %v", st.scripts.noFunctions.Load())
			}
			stats, err := admin.Info(t.Context(), "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			want, not := []string{"cmdstat_fcall:calls=2,"}, "cmdstat_eval"
			if !tc.functions {
				// The flushed cache: EVALSHA fails, EVAL loads; then EVALSHA.
				want, not = []string{"cmdstat_evalsha:calls=2,", "cmdstat_eval:calls=1,"}, "cmdstat_fcall"
			}
			for _, w := range want {
				if !strings.Contains(stats, w) {
					t.Errorf("commandstats lack %q:\n%s", w, stats)
				}
			}
			if strings.Contains(stats, not) {
				t.Errorf("commandstats have %q:\n%s", not, stats)
			}
		})
	}
}
