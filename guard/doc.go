// Package guard holds leases on named locks in Redis, so that a fleet of
// identical processes runs each piece of work on one of them at a time.
//
//	l, err := guard.New(redisClient)
//	...
//	err = l.WithLock(ctx, "nightly-report", func(ctx context.Context) error {
//		token, _ := guard.TokenFrom(ctx, "nightly-report")
//		return report.Run(ctx, token) // stop when ctx is done
//	})
//
// # Guarantees
//
// One owner: at any instant at most one writer, or any number of readers,
// holds a key, as long as the Redis server keeps its data (see Failover).
// With Permits(n), up to n writers hold it, each one of its n permits (see
// Permits below).
//
// Lease, not lock: every hold has a TTL (WithTTL, default 30s) kept in Redis,
// so a holder that crashes frees the key within its TTL. While a lease is
// held, one heartbeat per Locker renews it every RenewInterval (default
// TTL/3), batching the renewals of all its leases into a few pipelines.
//
// Told before it can be lost: for every acquisition and renewal the client
// records the monotonic time just before the request went out. The lease
// cannot expire in Redis before sent + TTL - drift, where drift = TTL/100 +
// 2ms allows for the client's and server's clocks running at slightly
// different rates. If no renewal has moved that point, the lease's context
// (and the job's, under WithLock) is canceled StopGrace (default TTL/10)
// before it, with a cause matching ErrLeaseLost; a renewal that finds the
// key gone or owned by another cancels it at once. So a job that stops when
// its context is done has stopped before anyone else can acquire the key.
// New rejects a schedule where a renewal and its timeout could not complete
// before that point.
//
// Owner tokens: each acquisition gets 130 random bits as its owner id; only
// its owner can renew or release it, each in one atomic Lua script.
// Expiry decisions inside Redis use the server's clock (TIME), never the
// client's.
//
// Reentrant through the context: a context handed out with a hold (the
// WithLock job's, or Lease.Context) re-enters that hold on the same Locker
// at once and keeps its fencing token; the hold counts live in Redis and the
// key is freed when the outermost lease ends. A write hold may take a read
// lease (a downgrade); a read hold asking for a write lease gets ErrUpgrade
// at once instead of a deadlock. Identity comes from the context, never from
// the goroutine.
//
// Waiting without polling: a waiter sleeps until a release is published on
// the lock's channel (one subscription per Locker) or, if a holder crashed
// and will never publish, until the key's remaining TTL has passed (see
// Waiting below).
//
// # Clock assumptions
//
// The client's monotonic clock and the server's clock must run at about the
// same rate (within 1% plus 2ms per TTL); their wall clocks may differ
// arbitrarily. Redis expires keys, and the scripts judge holds, by the
// server's wall clock (TIME): a forward step of that clock (a manual set, an
// NTP step rather than a slew) shortens every lease by the step, and a step
// larger than StopGrace can end a lease before its holder is told. Run NTP
// in slew mode on Redis hosts. A process paused longer than StopGrace (a
// long GC pause, a SIGSTOP, a VM migration) may resume after its lease
// expired without having been told in time: no lock can prevent that, which
// is why fencing exists.
//
// # Fencing
//
// Every fresh acquisition returns a fencing token (Lease.Token, TokenFrom):
// the key's counter in Redis plus one, but never below the server's clock in
// microseconds. Pass it to the resource the job writes to and have the
// resource reject a token lower than the highest it has seen. That is what
// makes the work safe when a holder was paused or partitioned past its
// lease: the lock alone cannot.
//
// On one server tokens strictly increase: the counter only grows, and an
// acquisition without FenceTTL makes it permanent. When the counter is lost
// (a failover that lost the latest acquisitions, a FenceTTL counter that
// expired, a restart without persistence), the clock floor keeps the next
// token above every earlier one as long as the servers' clocks agree to
// within the time that passed since (seconds for a failover). With
// WithReplicaAck(n, ...), an acquisition acknowledged by n replicas is on
// each of them, so promoting one of those keeps the counter itself.
//
// A small value that only the newest hold may write can live beside the
// lock, where the check needs no other resource: ClaimFenced stores it, in
// one script with the check, only while the caller's token is the newest the
// key's counter has minted, and Claimed reads it back (httpguard keeps
// completed responses so). Once a newer hold has begun, an older holder's
// store is refused with ErrSuperseded, whether or not its lease has noticed
// the loss. Where the counter is gone (a FenceTTL that expired, a failover
// that lost it) no token can be proven the newest, and every token is
// refused until the next acquisition starts the counter again.
//
// # Failover
//
// Redis replicates asynchronously: a failover can lose a fresh lock, and a
// second owner can then acquire it. WithReplicaAck narrows that window by
// waiting for replicas to acknowledge each acquisition and renewal. Use
// fencing tokens where a second owner would do harm: they stay monotonic
// across such a failover (see Fencing).
//
// # Lifecycle
//
// A Locker runs two heartbeat goroutines from New until Close, up to two
// goroutines that carry requests (started on first use), and one
// subscription connection while any acquisition waits. Close cancels the
// contexts of the leases it still holds (cause ErrClosed), keeps renewing
// them while their jobs return and release them, for up to WithCloseTimeout
// (default: the TTL), and leaves any still held then to expire in Redis: it
// never deletes a key under a running job. It then waits for requests still
// on the wire, which go-redis bounds by its read timeout. Every call returns
// when its context is done, also when the server is unreachable; a release
// runs on a context detached from the job's cancellation, bounded by the
// request timeout.
//
// # Errors
//
// ErrNotAcquired means Redis answered that another owner holds the key, for
// the whole wait; HeldFor tells how long that holder's lease has left. A
// wait that got no answer from Redis returns the transport or context error
// instead, so an outage is never mistaken for contention. Release returns
// nil only when it freed the hold: a retry of a release whose reply was lost
// is recognised by a short-lived marker the first try left in Redis, and a
// key that expired or was taken gives ErrNotHeld (WithLock then reports the
// loss). New accepts a *redis.Client (standalone, or Sentinel through
// redis.NewFailoverClient) or a *redis.ClusterClient, and refuses other
// client types (a *redis.Ring) with ErrInvalid.
//
// # Permits
//
// Permits(n) turns a key into a fleet-wide limit: WithLock and Acquire take
// one of its n permits, so at most n jobs hold it at once across every
// Locker that shares the Redis. Each permit is a lease like any other: its
// own owner id and fencing token, renewed by the heartbeat, its job told to
// stop before it could end, released when the job returns, kept for
// MinHold, freed within its TTL when its holder crashes. A release of one
// permit grants it to the oldest waiting acquisition (one wake-up per freed
// permit, not one per waiter); a release that frees none (the end of a
// re-entry, a release kept for MinHold) grants nothing. Taking a free
// permit costs one round trip, as taking a free key does, and releasing it
// one more. A re-entry through the context takes no second permit.
//
// Every holder of a key must ask for the same n: the number is kept with
// the holds, and an acquisition that asks for another one fails at once
// with ErrPermitsDiffer, so a limit never grows silently (during a rolling
// deploy that changes n, the new instances get errors until the old ones'
// holds end). A key with no holder takes the n of its next holder.
// Permits apply to write leases only; without Permits a key is a plain lock
// (n = 1) and nothing about it changes. Fencing tokens of one key's permits
// all come from one counter: a resource that several permit holders write
// at once cannot reject all but the newest token (nor can ClaimFenced, which
// stores for the newest hold only, as with readers); fence what each
// holder owns alone.
//
// # Waiting
//
// A waiting acquisition sleeps until a release is published on the lock's
// channel. A release names one waiting Locker of the fleet (the one whose
// registration was refreshed longest ago), so a hand-off costs a release
// and one retry, not a retry per process; if the named Locker does not take
// the key within 50ms (it crashed, or its waiters gave up), the others try.
// Readers that can share the key are let in together. Waiting is not
// strictly first-come, first-served, and a stream of readers can hold off a
// writer.
package guard

// Reading the code: the lease protocol in the order a WithLock runs it.
//
//	locker.go      Locker, New, the public calls, WithLock's run, Close
//	acquire.go     one acquisition: re-entry, attempts, the wait between them
//	store.go       the seam: what the Locker asks of where leases live, typed
//	redis_store.go that seam on one Redis deployment: one typed call per script
//	scripts.go     the script layer: functions (FCALL) or EVALSHA, NOSCRIPT, WAIT;
//	               scripts/*.lua (prelude.lua explains the hash a lock is)
//	hold.go        the hold a lease shares with its re-entries, and its end
//	heartbeat.go   when to renew, when to tell a job to stop (timing.go: the rules)
//	renewal.go     sending renewals in pipelines per node, applying answers
//	release.go     releasing a lease, retried safely
//	notify.go      waking waiters on release notifications (subscribe.go: connections)
//	lease.go, claim.go, claim_fenced.go, options.go, errors.go, observe.go, runner.go: the rest
