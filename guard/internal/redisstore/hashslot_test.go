package redisstore

import (
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// hashSlot agrees with CLUSTER KEYSLOT, hash tag edge cases included.
func TestHashSlot(t *testing.T) {
	c := redistest.StartCluster(t)
	node := c.Nodes()[0].Client(t)
	keys := []string{
		"", "a", "123456789", "guard:{job-1}", "guard:{job-1}:released",
		"{}", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{user1000}.following",
		"no-brace}", "{unclosed", "ünïcode{ключ}",
	}
	for _, key := range keys {
		want, err := node.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", key, err)
		}
		if got := hashSlot(key); int64(got) != want {
			t.Errorf("hashSlot(%q) = %d, CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}
