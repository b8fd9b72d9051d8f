package guard

import (
	"fmt"

	"github.com/jobguard/jobguard/guard/internal/clock"
	"github.com/jobguard/jobguard/guard/internal/quorumstore"
	"github.com/redis/go-redis/v9"
)

// NewQuorum returns a Locker that holds its leases on a quorum of N
// independent Redis masters (Redlock): N odd and at least 3, each client a
// *redis.Client of its own server (standalone, or a Sentinel group through
// redis.NewFailoverClient), never a Cluster's. A hold counts when a majority
// (N/2 + 1) of the masters granted it within its validity; renewals and
// releases need a majority too. The Locker's API and semantics are those of
// New: reentrancy through the context, read-write leases, waiting on release
// notifications, MinHold, heartbeats that cancel the job before the lease
// could end, fencing tokens that strictly increase (see the package doc,
// Redlock, for what each costs and assumes).
//
// Every option means what it means for New. WithRequestTimeout also bounds
// each master's answer to an acquisition: a master that does not answer in
// time counts as failed, so the default (TTL/10) keeps an acquisition far
// inside the TTL. WithReplicaAck applies to each master on its own: each
// waits for n of its replicas. It returns an error matching ErrInvalid for
// a nil, duplicate (the same client, or the same address) or Cluster client,
// for an even number of clients or fewer than 3, and for an option that does
// not fit.
func NewQuorum(clients []redis.UniversalClient, opts ...Option) (*Locker, error) {
	if err := checkQuorum(clients); err != nil {
		return nil, err
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	st := quorumstore.New(clients, quorumstore.Options{
		TTL: cfg.ttl, RequestTimeout: cfg.requestTimeout, Replicas: cfg.replicas, ReplicaTimeout: cfg.replicaTimeout,
	})
	return newLocker(st, clock.Real{}, cfg), nil
}

// checkQuorum validates NewQuorum's clients.
func checkQuorum(clients []redis.UniversalClient) error {
	if n := len(clients); n < 3 || n%2 == 0 {
		return fmt.Errorf("%w: a quorum needs an odd number of masters, at least 3; got %d", ErrInvalid, n)
	}
	byClient := make(map[*redis.Client]int, len(clients))
	byAddr := make(map[string]int, len(clients))
	for i, c := range clients {
		if isNil(c) {
			return fmt.Errorf("%w: quorum client %d is nil", ErrInvalid, i)
		}
		rc, ok := c.(*redis.Client)
		if !ok {
			return fmt.Errorf("%w: quorum client %d has type %T: each master must be a *redis.Client of its own server (a Cluster's masters are not independent)", ErrInvalid, i, c)
		}
		if j, dup := byClient[rc]; dup {
			return fmt.Errorf("%w: quorum clients %d and %d are the same client", ErrInvalid, j, i)
		}
		byClient[rc] = i
		// A failover client's Addr names no server; its Sentinel group
		// cannot be compared here.
		if addr := rc.Options().Addr; addr != "" && addr != "FailoverClient" {
			if j, dup := byAddr[addr]; dup {
				return fmt.Errorf("%w: quorum clients %d and %d both connect to %s", ErrInvalid, j, i, addr)
			}
			byAddr[addr] = i
		}
	}
	return nil
}
