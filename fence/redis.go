package fence

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/set.lua
	setLua string
	//go:embed scripts/del.lua
	delLua string
	//go:embed scripts/get.lua
	getLua string

	setScript = redis.NewScript(preludeLua + setLua)
	delScript = redis.NewScript(preludeLua + delLua)
	getScript = redis.NewScript(preludeLua + getLua)
)

// tokenPrefix starts the name of the key that keeps a data key's last
// token.
const tokenPrefix = "fence:"

// Redis fences data keys in Redis: Set, Del and Get each run one script
// that compares the caller's token with the last token accepted for the
// key, stored beside it, refuses a lower one with ErrStale, and otherwise
// records the token and writes (or reads). A Redis is safe for concurrent
// use.
//
// A read-modify-write reads with Get, not a plain GET: fencing the write
// alone lets a paused holder with an older token write between a newer
// holder's read and its Set, and the newer Set then overwrites that write
// unseen, a lost update that no token check catches.
//
// The token of key K lives at "fence:K" when K has a hash tag ({...}), and
// at "fence:{K}" otherwise: in K's Cluster slot either way. A key without a
// hash tag must therefore not contain '}'. Keys starting with "fence:" are
// best left to this package.
type Redis struct {
	client redis.UniversalClient
}

// NewRedis returns a fence on client: a standalone, Sentinel (failover) or
// Cluster client. Set, Del and Get return an error matching ErrInvalid if client
// is nil.
func NewRedis(client redis.UniversalClient) *Redis {
	return &Redis{client: client}
}

// Set stores value under key, with a TTL of ttl (0: no expiry), if no token
// higher than token has been accepted for key, and records token as the
// key's last one; otherwise it writes nothing and returns a *StaleError
// (matching ErrStale) naming key, token and the newer token. An equal token
// passes. The comparison and the write are one script: no write with a
// lower token can land after one with a higher token.
//
// The recorded token lives at least as long as the value (for good when
// ttl is 0), and is never given a shorter TTL than it has. Once it has
// expired, after the value, nothing is left to compare with and the next
// Set is accepted: give keys written by fenced writers a TTL longer than any
// writer could be paused, or none. value is anything go-redis can write: a
// string, []byte, number or encoding.BinaryMarshaler.
func (f *Redis) Set(ctx context.Context, key string, value any, token int64, ttl time.Duration) error {
	tk, err := f.check(ctx, key, token)
	if err != nil {
		return err
	}
	if ttl < 0 {
		return invalid("TTL %v for %q: want 0 (no expiry) or more", ttl, key)
	}
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1
	}
	res, err := setScript.Run(ctx, f.client, []string{key, tk}, value, strconv.FormatInt(token, 10), ms).Slice()
	return outcome("set", key, token, res, err)
}

// Del deletes key if no token higher than token has been accepted for it,
// and records token as the key's last one; otherwise it deletes nothing and
// returns a *StaleError (matching ErrStale). Deleting a key that does not
// exist is no error. The recorded token stays as long as the value would
// have lived (for good if it had no expiry), so that a stale Set after the
// Del is still refused.
func (f *Redis) Del(ctx context.Context, key string, token int64) error {
	tk, err := f.check(ctx, key, token)
	if err != nil {
		return err
	}
	res, err := delScript.Run(ctx, f.client, []string{key, tk}, strconv.FormatInt(token, 10)).Slice()
	return outcome("del", key, token, res, err)
}

// Get returns key's value for a holder of token that will write it back:
// it refuses a token lower than the last one accepted for key with a
// *StaleError (matching ErrStale), and otherwise records token as the key's
// last one, in the same script as the read. While that record lives, no
// writer with a lower token can change key, so a value read here is the
// value a Set with token replaces, unless a newer token wrote in between,
// in which case that Set is refused. found is false when key has no value.
//
// The record is kept as Set and Del keep it: at least as long as the value
// (for good when the value has no expiry), never shortened; reading a key
// with no value and no record yet records the token for good. A value about
// to expire therefore protects the read-modify-write only that long, as
// with Set: give keys that fenced writers read and write a TTL longer than
// any writer could be paused, or none.
func (f *Redis) Get(ctx context.Context, key string, token int64) (value []byte, found bool, err error) {
	tk, err := f.check(ctx, key, token)
	if err != nil {
		return nil, false, err
	}
	res, err := getScript.Run(ctx, f.client, []string{key, tk}, strconv.FormatInt(token, 10)).Slice()
	if err == nil && len(res) == 3 {
		if applied, _ := res[0].(int64); applied == 1 {
			switch v := res[2].(type) {
			case nil:
				return nil, false, nil
			case string:
				return []byte(v), true, nil
			}
		}
	}
	return nil, false, outcome("get", key, token, res, err)
}

// check validates the arguments of Set, Del and Get and returns the name of
// key's token key.
func (f *Redis) check(ctx context.Context, key string, token int64) (string, error) {
	switch {
	case f == nil || f.client == nil:
		return "", invalid("nil Redis client")
	case ctx == nil:
		return "", invalid("nil context")
	case key == "":
		return "", invalid("empty key")
	case token <= 0:
		return "", invalid("token %d for %q: tokens are positive", token, key)
	}
	return tokenKey(key)
}

// outcome turns a script's reply {applied, token} into Set's, Del's or
// Get's result.
func outcome(op, key string, token int64, res []any, err error) error {
	if err != nil {
		return fmt.Errorf("fence: %s %q with token %d: %w", op, key, token, err)
	}
	if len(res) == 2 {
		applied, ok1 := res[0].(int64)
		stored, ok2 := res[1].(string)
		newer, err := strconv.ParseInt(stored, 10, 64)
		switch {
		case ok1 && ok2 && applied == 1:
			return nil
		case ok1 && ok2 && applied == 0 && err == nil:
			return &StaleError{Resource: key, Token: token, Newer: newer}
		}
	}
	return fmt.Errorf("fence: %s %q: unexpected reply %v", op, key, res)
}

// tokenKey returns the key that keeps key's last token, in key's Cluster
// hash slot: the slot of a key's hash tag (the text between its first '{'
// and the next '}', if not empty), or of the whole key without one.
func tokenKey(key string) (string, error) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return tokenPrefix + key, nil // the prefix has no brace: same tag
		}
	}
	if strings.IndexByte(key, '}') >= 0 {
		return "", invalid("key %q has '}' but no hash tag: no other key is sure to share its Cluster slot", key)
	}
	return tokenPrefix + "{" + key + "}", nil
}
