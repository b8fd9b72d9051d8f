package guard

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Fuzz targets for the checks of store.Keys and options. Their seed corpora (the
// f.Add calls and testdata/fuzz) run with every go test; go test -fuzz
// explores further:
//
//	go test -run '^$' -fuzz '^FuzzKey$' -fuzztime 20s ./guard/
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 20s ./guard/

// FuzzKey checks the key rules: checkKey accepts exactly the store.Keys that are
// non-empty and have no '}', every other key fails Acquire and Inspect with
// ErrInvalid before anything is sent, every Redis key and channel of a valid
// lock lands in the hash slot of the key itself (its {key} hash tag), and a
// valid key round-trips through a real server: Acquire with Wait(0) takes
// it, Lease.Key and Inspect give it back with the lease's token, and Release
// frees it.
func FuzzKey(f *testing.F) {
	for _, s := range []string{
		"k", "", "}", "{", "{}", "a}b", "a{b", "{a}", "a{b}c", "job:nightly-report", "*", "?", "[a-z]",
		"a:fence", "a:released", "a:waiters", "a:done:x", " ", "\x00", "a\x00b", "\xff\xfe", "clé", "日本",
		"\r\n", "$5\r\nhello", strings.Repeat("k", 1024), strings.Repeat("{", 64), "a\\}", `"}"`,
	} {
		f.Add(s)
	}
	srv := redistest.Start(f)
	client := srv.Client(f)
	l, err := New(client, WithTTL(5*time.Second))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = l.Close() })

	f.Fuzz(func(t *testing.T, key string) {
		valid := key != "" && len(key) <= maxKeyLen && !strings.Contains(key, "}")
		err := checkKey(key)
		switch {
		case valid && err != nil:
			t.Fatalf("checkKey(%q) = %v, want nil", key, err)
		case !valid && !errors.Is(err, ErrInvalid):
			t.Fatalf("checkKey(%q) = %v, want an error matching ErrInvalid", key, err)
		}
		ctx := t.Context()
		if !valid {
			le, err := l.Acquire(ctx, key, Wait(0))
			if le != nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Acquire(%q) = %v, %v; want nil and ErrInvalid", key, le, err)
			}
			if _, err := l.Inspect(ctx, key); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Inspect(%q): %v, want ErrInvalid", key, err)
			}
			return
		}
		k := store.KeysFor(l.cfg.prefix, key)
		for _, rk := range []string{k.Lock, k.Fence, k.Channel, k.Waiters, k.DoneMarker("owner")} {
			if tag := hashTag(rk); tag != key {
				t.Fatalf("Redis key %q of lock %q hashes on %q, not on the lock's key", rk, key, tag)
			}
		}
		le, err := l.Acquire(ctx, key, Wait(0))
		if err != nil {
			t.Fatalf("Acquire(%q): %v", key, err)
		}
		defer func() { _ = le.Release(ctx) }()
		if le.Key() != key {
			t.Fatalf("Lease.Key() = %q, want %q", le.Key(), key)
		}
		if tok, ok := TokenFrom(le.Context(), key); !ok || tok != le.Token() {
			t.Fatalf("TokenFrom(lease ctx, %q) = %d, %v; want %d, true", key, tok, ok, le.Token())
		}
		st, err := l.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		if st.Key != key || len(st.Holders) != 1 || st.Holders[0].Token != le.Token() || !st.Holders[0].Write {
			t.Fatalf("Inspect(%q) = %+v; want one write holder with token %d", key, st, le.Token())
		}
		if err := le.Release(ctx); err != nil {
			t.Fatalf("Release(%q): %v", key, err)
		}
		n, err := client.Exists(ctx, k.Lock).Result()
		if err != nil || n != 0 {
			t.Fatalf("after Release, EXISTS %q = %d, %v; want 0", k.Lock, n, err)
		}
	})
}

// hashTag is the part of a Redis key that Redis Cluster hashes (the Cluster
// specification's key hash tags): the text between the first '{' and the
// first '}' after it, when that is not empty; else the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// fuzzOptions is one fuzzed set of Locker options; set says which were given.
type fuzzOptions struct {
	set                                    uint8
	ttl, interval, grace, timeout, closeTO int64
	replicas                               int
	replicaTO                              int64
	prefix                                 string
}

const (
	setTTL = 1 << iota
	setInterval
	setGrace
	setTimeout
	setClose
	setPrefix
	setReplicas
)

func (o fuzzOptions) options() []Option {
	var opts []Option
	add := func(bit uint8, opt Option) { opts = appendIfSet(opts, o.set, bit, opt) }
	add(setTTL, WithTTL(time.Duration(o.ttl)))
	add(setInterval, WithRenewInterval(time.Duration(o.interval)))
	add(setGrace, WithStopGrace(time.Duration(o.grace)))
	add(setTimeout, WithRequestTimeout(time.Duration(o.timeout)))
	add(setClose, WithCloseTimeout(time.Duration(o.closeTO)))
	add(setPrefix, WithPrefix(o.prefix))
	add(setReplicas, WithReplicaAck(o.replicas, time.Duration(o.replicaTO)))
	return opts
}

// want is the configuration the options document, and whether it is valid,
// computed independently of newConfig.
func (o fuzzOptions) want() (config, bool) {
	pick := func(bit uint8, v int64, def time.Duration) time.Duration {
		if o.set&bit != 0 {
			return time.Duration(v)
		}
		return def
	}
	c := config{prefix: "guard:"}
	c.ttl = pick(setTTL, o.ttl, 30*time.Second)
	if c.ttl <= 0 {
		return c, false
	}
	c.renewInterval = pick(setInterval, o.interval, c.ttl/3)
	c.stopGrace = pick(setGrace, o.grace, c.ttl/10)
	c.requestTimeout = pick(setTimeout, o.timeout, c.ttl/10)
	c.closeTimeout = pick(setClose, o.closeTO, c.ttl)
	if o.set&setPrefix != 0 {
		c.prefix = o.prefix
	}
	if o.set&setReplicas != 0 {
		c.replicas, c.replicaTimeout = o.replicas, time.Duration(o.replicaTO)
	}
	ok := c.closeTimeout >= 0 && !strings.ContainsAny(c.prefix, "{}") &&
		c.replicas >= 0 && (c.replicas == 0 || c.replicaTimeout > 0) &&
		scheduleFits(c.ttl, c.renewInterval, c.stopGrace, c.requestTimeout)
	return c, ok
}

// scheduleFits is the documented rule for a lease's schedule, in exact
// arithmetic: 0 < TTL <= 100 years, 0 < interval < TTL, 0 <= grace < TTL,
// timeout > 0, and interval + timeout + grace <= TTL - (TTL/100 + 2ms).
func scheduleFits(ttl, interval, grace, timeout time.Duration) bool {
	if ttl <= 0 || ttl > 100*365*24*time.Hour || interval <= 0 || interval >= ttl || grace < 0 || grace >= ttl || timeout <= 0 {
		return false
	}
	sum := new(big.Int).Add(big.NewInt(int64(interval)), big.NewInt(int64(timeout)))
	sum.Add(sum, big.NewInt(int64(grace)))
	budget := new(big.Int).Sub(big.NewInt(int64(ttl)), big.NewInt(int64(ttl/100+2*time.Millisecond)))
	return sum.Cmp(budget) <= 0
}

// checkTiming fails t unless tm satisfies the documented schedule rule.
func checkTiming(t *testing.T, what string, tm timing) {
	t.Helper()
	if !scheduleFits(tm.ttl, tm.interval, tm.grace, tm.timeout) {
		t.Fatalf("%s: accepted schedule %+v breaks interval + timeout + grace <= TTL - drift (or a bound)", what, tm)
	}
}

// fuzzLockOptions is one fuzzed set of acquisition options; set says which
// were given.
type fuzzLockOptions struct {
	set                          uint8
	wait, ttl, minHold, fenceTTL int64
	permits                      int
}

const (
	setWait = 1 << iota
	setLockTTL
	setMinHold
	setFenceTTL
	setPermits
)

func (o fuzzLockOptions) options() []LockOption {
	var opts []LockOption
	add := func(bit uint8, opt LockOption) { opts = appendIfSet(opts, o.set, bit, opt) }
	add(setWait, Wait(time.Duration(o.wait)))
	add(setLockTTL, TTL(time.Duration(o.ttl)))
	add(setMinHold, MinHold(time.Duration(o.minHold)))
	add(setFenceTTL, FenceTTL(time.Duration(o.fenceTTL)))
	add(setPermits, Permits(o.permits))
	return opts
}

// valid reports whether the options are valid for an acquisition with the
// Locker's TTL def, write or read, by the documented rules (the schedule
// scaled to a TTL option is checked separately).
func (o fuzzLockOptions) valid(write bool) bool {
	given := func(bit uint8) bool { return o.set&bit != 0 }
	switch {
	case given(setWait) && o.wait < 0,
		given(setLockTTL) && o.ttl <= 0,
		given(setMinHold) && o.minHold < 0,
		given(setFenceTTL) && o.fenceTTL < 0,
		given(setPermits) && (o.permits < 1 || !write):
		return false
	}
	return true
}

// FuzzOptions checks option validation: newConfig (what New and NewQuorum
// run) accepts exactly the options that the doc comments allow and fills in
// the documented defaults; New and NewQuorum agree with it and return a
// Locker or an error matching ErrInvalid, never both, never a panic; and an
// acquisition's options are accepted exactly when documented, with a TTL
// option giving a schedule that still satisfies the Locker's rule.
func FuzzOptions(f *testing.F) {
	const s, ms = int64(time.Second), int64(time.Millisecond)
	type seed struct {
		o  fuzzOptions
		lo fuzzLockOptions
	}
	for _, sd := range []seed{
		{},
		{fuzzOptions{set: setTTL, ttl: 30 * s}, fuzzLockOptions{set: setWait | setLockTTL, ttl: 10 * s}},
		{fuzzOptions{set: setTTL | setInterval, ttl: s, interval: s}, fuzzLockOptions{}},
		{fuzzOptions{set: setTTL | setInterval | setGrace | setTimeout, ttl: 10 * s, interval: 5 * s, grace: 2 * s, timeout: 2*s + 898*ms}, fuzzLockOptions{set: setLockTTL, ttl: 7 * s}},
		{fuzzOptions{set: setTTL | setInterval | setGrace | setTimeout, ttl: 10 * s, interval: 5 * s, grace: 2 * s, timeout: 2*s + 899*ms}, fuzzLockOptions{}},
		{fuzzOptions{set: setTTL, ttl: 1}, fuzzLockOptions{}},
		{fuzzOptions{set: setTTL, ttl: 3 * ms}, fuzzLockOptions{}},
		{fuzzOptions{set: setTTL, ttl: -s}, fuzzLockOptions{}},
		{fuzzOptions{set: setPrefix, prefix: "a{b"}, fuzzLockOptions{}},
		{fuzzOptions{set: setPrefix, prefix: ""}, fuzzLockOptions{set: setPermits, permits: 3}},
		{fuzzOptions{set: setReplicas, replicas: 1}, fuzzLockOptions{set: setPermits, permits: 0}},
		{fuzzOptions{set: setReplicas, replicas: -1, replicaTO: s}, fuzzLockOptions{}},
		{fuzzOptions{set: setReplicas, replicas: 2, replicaTO: s}, fuzzLockOptions{set: setMinHold | setFenceTTL, minHold: -1, fenceTTL: s}},
		{fuzzOptions{set: setClose, closeTO: -1}, fuzzLockOptions{set: setWait, wait: -1}},
		{fuzzOptions{set: setTTL, ttl: math.MaxInt64}, fuzzLockOptions{set: setLockTTL, ttl: math.MaxInt64 / 3}},
		{fuzzOptions{set: setTTL | setInterval | setGrace | setTimeout, ttl: math.MaxInt64, interval: math.MaxInt64 / 2, grace: math.MaxInt64 / 2, timeout: math.MaxInt64 / 2}, fuzzLockOptions{}},
		{fuzzOptions{set: setTTL, ttl: 30 * s}, fuzzLockOptions{set: setLockTTL, ttl: 1}},
	} {
		o, lo := sd.o, sd.lo
		f.Add(o.set, o.ttl, o.interval, o.grace, o.timeout, o.closeTO, o.replicas, o.replicaTO, o.prefix,
			lo.set, lo.wait, lo.ttl, lo.minHold, lo.fenceTTL, lo.permits, true)
	}
	// Clients that are never dialed: New and NewQuorum send nothing.
	var clients []*redis.Client
	for _, addr := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"} {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: addr}))
	}
	f.Cleanup(func() {
		for _, c := range clients {
			_ = c.Close()
		}
	})
	quorum := []redis.UniversalClient{clients[0], clients[1], clients[2]}

	f.Fuzz(func(t *testing.T, set uint8, ttl, interval, grace, timeout, closeTO int64, replicas int, replicaTO int64, prefix string,
		lset uint8, wait, lttl, minHold, fenceTTL int64, permits int, write bool) {
		o := fuzzOptions{set, ttl, interval, grace, timeout, closeTO, replicas, replicaTO, prefix}
		lo := fuzzLockOptions{lset, wait, lttl, minHold, fenceTTL, permits}
		want, valid := o.want()

		cfg, err := newConfig(o.options())
		switch {
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Fatalf("newConfig(%+v): %v, want an error matching ErrInvalid", o, err)
		case err != nil && valid:
			t.Fatalf("newConfig(%+v) refused documented-valid options: %v", o, err)
		case err == nil && !valid:
			t.Fatalf("newConfig(%+v) accepted options the docs forbid: %+v", o, cfg)
		}
		l, newErr := New(clients[0], o.options()...)
		q, quorumErr := NewQuorum(quorum, o.options()...)
		for _, r := range []struct {
			name string
			l    *Locker
			err  error
		}{{"New", l, newErr}, {"NewQuorum", q, quorumErr}} {
			if (r.err == nil) != (err == nil) || (r.err == nil) != (r.l != nil) || (r.err != nil && !errors.Is(r.err, ErrInvalid)) {
				t.Fatalf("%s(%+v) = %v, %v; newConfig said %v", r.name, o, r.l, r.err, err)
			}
		}
		if err != nil {
			return
		}
		defer l.Close()
		defer q.Close()
		if cfg.ttl != want.ttl || cfg.renewInterval != want.renewInterval || cfg.stopGrace != want.stopGrace ||
			cfg.requestTimeout != want.requestTimeout || cfg.closeTimeout != want.closeTimeout || cfg.prefix != want.prefix ||
			cfg.replicas != want.replicas || cfg.replicaTimeout != want.replicaTimeout {
			t.Fatalf("newConfig(%+v) = %+v, want the documented %+v", o, cfg, want)
		}
		base, err := cfg.scaled(cfg.ttl)
		if err != nil {
			t.Fatalf("scaled to its own TTL: %v", err)
		}
		checkTiming(t, "Locker schedule", base)

		lc, err := newLockConfig(cfg.ttl, "k", write, lo.options())
		switch {
		case err != nil && !errors.Is(err, ErrInvalid):
			t.Fatalf("newLockConfig(%+v, write %v): %v, want ErrInvalid", lo, write, err)
		case (err == nil) != lo.valid(write):
			t.Fatalf("newLockConfig(%+v, write %v) = %v; documented valid: %v", lo, write, err, lo.valid(write))
		}
		var tm timing
		var scaledErr error
		if err == nil {
			if tm, scaledErr = cfg.scaled(lc.ttl); scaledErr == nil {
				checkTiming(t, "scaled schedule", tm)
				if tm.ttl != lc.ttl {
					t.Fatalf("scaled schedule TTL %v, want the lease TTL %v", tm.ttl, lc.ttl)
				}
			} else if !errors.Is(scaledErr, ErrInvalid) {
				t.Fatalf("scaled(%v): %v, want ErrInvalid", lc.ttl, scaledErr)
			} else if scale := func(d time.Duration) time.Duration {
				return time.Duration(float64(d) * float64(lc.ttl) / float64(cfg.ttl))
			}; scheduleFits(lc.ttl, scale(cfg.renewInterval), scale(cfg.stopGrace), scale(cfg.requestTimeout)) {
				t.Fatalf("scaled(%v) refused a schedule the documented rule accepts: %v", lc.ttl, scaledErr)
			}
		}
		if write {
			verr := l.ValidateLockOptions(lo.options()...)
			if wantOK := err == nil && scaledErr == nil; (verr == nil) != wantOK || (verr != nil && !errors.Is(verr, ErrInvalid)) {
				t.Fatalf("ValidateLockOptions(%+v) = %v; newLockConfig %v, scaled %v", lo, verr, err, scaledErr)
			}
			qerr := q.ValidateLockOptions(lo.options()...)
			wantOK := err == nil && scaledErr == nil && lc.permits == 1
			if (qerr == nil) != wantOK || (qerr != nil && !errors.Is(qerr, ErrInvalid)) {
				t.Fatalf("quorum ValidateLockOptions(%+v) = %v; want ok %v", lo, qerr, wantOK)
			}
		}
	})
}

// appendIfSet appends opt when bit is in set: a fuzz input picks which
// options it passes.
func appendIfSet[O any](opts []O, set, bit uint8, opt O) []O {
	if set&bit != 0 {
		return append(opts, opt)
	}
	return opts
}
