package guard

import (
	"context"
	"strings"
)

// Redis may evict a lock's keys under memory pressure unless its
// maxmemory-policy is noeviction: an allkeys-* policy evicts any key, and a
// volatile-* one any key with a TTL, which every key of guard's has. An
// evicted lock is free to the next acquisition while its holder still
// runs (its next renewal finds it gone and stops the job, up to a renew
// interval later); an evicted fencing counter starts again from the
// server's clock. So a Locker checks, once after its first acquisition
// (when Redis is known to answer) and off the caller's path, and warns.

// serverPolicy is one server's eviction settings.
type serverPolicy struct {
	node      string // its address, "" for the only one
	maxmemory string // "0": no limit, so nothing is evicted
	policy    string
}

// evicts reports whether the server may evict guard's keys.
func (p serverPolicy) evicts() bool {
	return p.maxmemory != "" && p.maxmemory != "0" && p.policy != "" && p.policy != "noeviction"
}

// warnEviction asks every server for its eviction settings and logs a
// warning for each that may evict guard's keys. A server that does not
// answer, or denies CONFIG (a managed service may), is skipped at Debug.
func (l *Locker) warnEviction() {
	ctx, cancel := context.WithTimeout(l.life, l.cfg.requestTimeout)
	defer cancel()
	policies, err := l.store.evictionPolicies(ctx)
	if err != nil && l.life.Err() == nil {
		l.log.Debug("guard: could not read maxmemory-policy", "err", err)
	}
	for _, p := range policies {
		if p.evicts() {
			l.log.Warn("guard: Redis may evict lock keys under memory pressure: a lock evicted while held lets a second owner in; "+
				"set maxmemory-policy noeviction, or keep guard's keys on a server of their own",
				"server", p.node, "maxmemory-policy", p.policy, "maxmemory", p.maxmemory)
		}
	}
}

// configPolicy reads maxmemory and maxmemory-policy from a CONFIG GET reply.
func configPolicy(node string, config map[string]string) serverPolicy {
	return serverPolicy{node: node, maxmemory: strings.TrimSpace(config["maxmemory"]), policy: strings.TrimSpace(config["maxmemory-policy"])}
}
