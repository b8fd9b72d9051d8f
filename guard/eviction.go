package guard

import (
	"context"
)

// Redis may evict a lock's keys under memory pressure unless its
// maxmemory-policy is noeviction: an allkeys-* policy evicts any key, and a
// volatile-* one any key with a TTL, which every lock hash of guard's has.
// An evicted lock is free to the next acquisition while its holder still
// runs (its next renewal finds it gone and stops the job, up to a renew
// interval later); an evicted fencing counter starts again from the
// server's clock. So a Locker checks, once after its first acquisition
// (when Redis is known to answer) and off the caller's path, and warns.
// It reads INFO memory, which answers where CONFIG is renamed or denied.

// warnEviction asks every server for its eviction settings and logs a
// warning for each that may evict guard's keys, naming what it may evict.
// A server that does not answer is skipped at Debug.
func (l *Locker) warnEviction() {
	ctx, cancel := context.WithTimeout(l.life, l.cfg.requestTimeout)
	defer cancel()
	policies, err := l.store.EvictionPolicies(ctx)
	if err != nil && l.life.Err() == nil {
		l.log.Debug("guard: could not read maxmemory-policy", "err", err)
	}
	for _, p := range policies {
		if p.Evicts() {
			l.log.Warn("guard: Redis may evict lock keys under memory pressure: a lock evicted while held lets a second owner in; "+
				"set maxmemory-policy noeviction, or keep guard's keys on a server of their own",
				"server", p.Node, "maxmemory-policy", p.Policy, "maxmemory", p.MaxMemory, "evicts", p.Evictable())
		}
	}
}
