package main

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// policy is one server's eviction settings, as INFO memory reports them.
type policy struct {
	server    string
	maxMemory string // "0": no limit, so nothing is evicted
	name      string
}

// evicts reports whether the server may evict guard's keys: a memory limit
// and a policy other than noeviction (guard/eviction.go, which a Locker
// logs from once after its first acquisition; guardctl never acquires, so
// it asks itself).
func (p policy) evicts() bool {
	return p.maxMemory != "" && p.maxMemory != "0" && p.name != "" && p.name != "noeviction"
}

// evictable says which of guard's keys the policy may evict: allkeys-*
// any key, the fencing counter too; volatile-* keys with a TTL, which
// every lock hash has and a counter only under FenceTTL.
func (p policy) evictable() string {
	switch {
	case strings.HasPrefix(p.name, "allkeys-"):
		return "any key, a held lock and its fencing counter"
	case strings.HasPrefix(p.name, "volatile-"):
		return "keys with a TTL, a held lock among them"
	}
	return "keys, under a policy guardctl does not know"
}

// parsePolicy reads maxmemory and maxmemory_policy from an INFO memory
// reply: INFO answers where CONFIG is renamed or denied.
func parsePolicy(server, info string) policy {
	p := policy{server: server}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case !ok:
		case name == "maxmemory":
			p.maxMemory = value
		case name == "maxmemory_policy":
			p.name = value
		}
	}
	return p
}

// warnEviction writes one line to standard error for each server of the
// deployment (each master of a Cluster) that may evict guard's keys under
// memory pressure: a lock shown as held there may vanish, and a second
// owner get in while its holder runs. A server that does not answer INFO
// is passed over in silence: the command's own request reports an outage.
// The requests are bounded by --timeout together.
func (c *cli) warnEviction(ctx context.Context, client redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	var mu sync.Mutex
	var policies []policy
	read := func(ctx context.Context, rc *redis.Client, server string) error {
		info, err := rc.Info(ctx, "memory").Result()
		if err == nil {
			mu.Lock()
			policies = append(policies, parsePolicy(server, info))
			mu.Unlock()
		}
		return nil
	}
	switch cl := client.(type) {
	case *redis.ClusterClient:
		_ = cl.ForEachMaster(ctx, func(ctx context.Context, rc *redis.Client) error { return read(ctx, rc, rc.Options().Addr) })
	case *redis.Client:
		server := "the URL given"
		if shown, err := maskURL(c.opts.url); err == nil {
			server = shown
		}
		_ = read(ctx, cl, server)
	}
	for _, p := range policies {
		if p.evicts() {
			c.fail("warning: Redis at %s may evict lock keys under memory pressure (maxmemory %s, maxmemory-policy %s evicts %s): "+
				"a lock evicted while held lets a second owner in while its holder runs; set maxmemory-policy noeviction",
				p.server, p.maxMemory, p.name, p.evictable())
		}
	}
}
