package locks

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseLua deletes KEYS[1] if it still holds the owner token ARGV[1].
// Returns 1 when deleted, 0 otherwise.
const releaseLua = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// rawLib is the floor any Redis lock pays: SET key token NX PX ttl to
// acquire, polling every RetryDelay while the key is busy, and one
// compare-and-DEL script to release. It never renews and has no fencing,
// reentrancy or owner check beyond the release script.
type rawLib struct {
	c       *redis.Client
	release *redis.Script
	cfg     Config
}

func newRaw(client *redis.Client, cfg Config) *rawLib {
	return &rawLib{c: client, release: redis.NewScript(releaseLua), cfg: cfg}
}

func (r *rawLib) Lock(ctx context.Context, key string) (Lease, error) {
	token := rand.Text()
	for {
		err := r.c.Do(ctx, "SET", key, token, "NX", "PX", r.cfg.TTL.Milliseconds()).Err()
		switch {
		case err == nil:
			return &rawLease{r: r, key: key, token: token}, nil
		case !errors.Is(err, redis.Nil):
			return nil, err
		case r.cfg.RetryDelay <= 0:
			return nil, errors.New("locks: raw: busy")
		}
		t := time.NewTimer(r.cfg.RetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (r *rawLib) Close() error { return nil }

type rawLease struct {
	r     *rawLib
	key   string
	token string
}

func (l *rawLease) Unlock(ctx context.Context) error {
	n, err := l.r.release.Run(ctx, l.r.c, []string{l.key}, l.token).Int64()
	if err == nil && n == 0 {
		return ErrNotHeld
	}
	return err
}

func (l *rawLease) Lost() bool { return false }
