package redisstore

import (
	"errors"
	"testing"

	"github.com/jobguard/jobguard/guard/internal/store"
	"github.com/redis/go-redis/v9"
)

// replyError is an error reply from Redis, as go-redis hands it over.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// A redirection or TRYAGAIN is a slot on the move only for a Cluster
// client. A plain client pointed at a Cluster node gets MOVED for every
// key of another node's slots, for good: an Acquire that took it for a
// migration would try again until its context ended, hiding the
// misconfiguration.
func TestSlotMovingOnlyOnCluster(t *testing.T) {
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = cluster.Close() })
	for _, reply := range []string{"MOVED 3999 127.0.0.1:7001", "ASK 3999 127.0.0.1:7001", "TRYAGAIN Multiple keys request during rehashing of slot"} {
		plain := (&Store{}).classify(replyError(reply))
		if errors.Is(plain, store.ErrTryAgain) {
			t.Errorf("plain client, %q: %v matches ErrTryAgain; want the reply as is", reply, plain)
		}
		if got := (&Store{cluster: cluster}).classify(replyError(reply)); !errors.Is(got, store.ErrTryAgain) {
			t.Errorf("Cluster client, %q: %v; want ErrTryAgain", reply, got)
		}
	}
}
