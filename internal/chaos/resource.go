package chaos

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jobguard/jobguard/fence"
	"github.com/redis/go-redis/v9"
)

// Resource is the shared counter the workers update: one key on a Redis
// that no fault touches, fenced on both sides of each read-modify-write
// (fence.Redis.Get, then fence.Redis.Set).
type Resource struct {
	client redis.UniversalClient
	fence  *fence.Redis
	key    string
}

// NewResource returns the counter at key on client.
func NewResource(client redis.UniversalClient, key string) (*Resource, error) {
	if key == "" {
		return nil, fmt.Errorf("chaos: empty resource key")
	}
	return &Resource{client: client, fence: fence.NewRedis(client), key: key}, nil
}

// Read returns the counter (0 when unset) with fence.Redis.Get, which
// raises the key's fence to token first; a token lower than the fence gets
// a *fence.StaleError.
func (r *Resource) Read(ctx context.Context, token int64) (int64, error) {
	v, _, err := r.fence.Get(ctx, r.key, token)
	if err != nil {
		return 0, err
	}
	return parseCounter(string(v))
}

// Write stores value with fence.Redis.Set under token.
func (r *Resource) Write(ctx context.Context, token, value int64) error {
	return r.fence.Set(ctx, r.key, value, token, 0)
}

// Value returns the counter without fencing, for the final check.
func (r *Resource) Value(ctx context.Context) (int64, error) {
	s, err := r.client.Get(ctx, r.key).Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseCounter(s)
}

func parseCounter(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("chaos: counter holds %q", s)
	}
	return v, nil
}
