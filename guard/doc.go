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
// TTL/3), batching the renewals of all its leases into a few pipelines:
// leases whose renewals come due within a tenth of the interval of each
// other share one pipeline, sent as one request to each Cluster master
// that serves some of them.
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
// at once and keeps its fencing token; the key is freed when the outermost
// lease ends. Only this process can re-enter its own hold, so its leases
// are counted in the process and a re-entry, and the release of a lease
// that is not the hold's last, cost no round trip: Redis keeps the hold as
// one lease of its mode. A write hold may take a read lease (a downgrade);
// when its last write lease ends while read leases remain, a round trip
// makes it a read hold in Redis, so other owners' readers may join. A read
// hold asking for a write lease gets ErrUpgrade at once instead of a
// deadlock. A re-entry answers from what this process knows of the hold: a
// hold known to be lost gives its loss cause, and a loss that the next
// renewal will find (a force-release, say) is not seen before it. Identity
// comes from the context, never from the goroutine.
//
// Waiting without polling: a waiter sleeps until a release is published on
// the lock's channel (one subscription per Locker; on Cluster, one per
// hash slot waited on) or, if a holder crashed and will never publish,
// until the key's remaining TTL has passed (on a quorum, until enough
// masters' holds could have expired); see Waiting below.
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
// key's counter has minted, and Claimed reads it back. Once a newer hold
// has begun, an older holder's store is refused with ErrSuperseded, whether
// or not its lease has noticed the loss. Where the counter is gone (a
// FenceTTL that expired, a failover that lost it) no token can be proven the
// newest, and every token is refused until the next acquisition starts the
// counter again. WithClaim runs a job so, for work whose result a retry is
// given (httpguard keeps completed responses so): the claim's check, the
// acquisition and the binding in one request, the fenced store and the
// release in another.
//
// # Failover
//
// Redis replicates asynchronously: a failover can lose a fresh lock, and a
// second owner can then acquire it. WithReplicaAck narrows that window by
// waiting for replicas to acknowledge each acquisition and renewal. Use
// fencing tokens where a second owner would do harm: they stay monotonic
// across such a failover (see Fencing).
//
// A hold that the promoted replica has is kept: the holder's renewals go
// on against it, and others wait. A hold it lacks lets another owner in
// at once, while the first holder learns of it only at its next renewal
// (up to a renew interval later) or its stop time, whichever comes first:
// for that while two owners are live, and only fencing protects the data.
// On Cluster, where WithReplicaAck is not available, nothing narrows that
// window. With WithReplicaAck(n, …), a failover that leaves fewer than n
// replicas makes every renewal fail, so the holder is told to stop at its
// stop time, and no acquisition succeeds (ErrNotReplicated) until enough
// replicas are back.
//
// # Redlock
//
// NewQuorum holds leases on N independent masters (N odd, at least 3, with
// no replication or Cluster between them), as in Redlock. Every request goes
// to all of them at once and counts when a majority (N/2 + 1) answers it the
// same way; its answer is ready as soon as a majority has decided it, so a
// dead or slow minority costs nothing.
//
// An acquisition stands when a majority granted it within its validity: the
// TTL, less the time since the request went out, less the drift. Each
// master's answer is bounded by the request timeout (WithRequestTimeout,
// default TTL/10, far below the TTL). An attempt that no majority granted
// is dropped at once on every master that granted it or did not answer.
// ErrNotAcquired means a majority answered and did not grant it (HeldFor is
// how long until enough of them could be free for a majority); too few
// answers give an error, as an outage of one server does. The lease's end is
// computed as on one server, from the time the request went out: every master
// of the majority holds the lease until at least then. A renewal counts when
// a majority applied it; when a majority says expired or taken, the lease is
// lost at once; otherwise it is retried until the stop time, as on one
// server. So the job is told to stop before another owner could hold a
// majority. A renewal does not take the key on a master that lost or never
// got the hold (one that granted it too late to count does hold it): a
// lease held by just a majority is lost when one of those masters fails. Releases count on a majority too: an answer is
// never taken as applied on fewer than a majority. Reentrancy, read-write
// leases, MinHold, waiting and Close are those of one server, with one
// difference in waiting: a release does not grant the key to a waiter (one
// master's grant is not a majority's), it names the next waiting Locker,
// whose waiter then acquires on every master. Every master publishes a
// release, and a waiter wakes on the first copy. After a split vote (some
// masters granted an attempt, not a majority) the busy answer comes back
// after a random delay, so that contenders woken together do not split
// again; the attempt's drop on the masters that granted it wakes the other
// contenders, not the attempt's own waiter, which sleeps until enough of
// the busy masters' holds could have expired. So a release that reached
// only a minority of masters, or a master that restarted empty, costs a
// waiter an attempt per expiry of the majority's holds, not a retry loop.
// Claim, Claimed and ClaimFenced need a majority too, and WithClaim takes
// its steps as requests of their own.
//
// An attempt whose request to a master timed out is dropped there after its
// timeout, in order with the owner's other requests; but a request delayed
// on a slow link can still reach that master after the drop, leaving a
// hold nobody renews on that one master until its TTL. It is a minority
// hold: it blocks no majority unless another master fails meanwhile.
//
// Fencing tokens strictly increase: the token of an acquisition is the
// largest a majority returned, and before it is handed out it is written
// back to the masters whose counter is lower, until a majority of those that
// granted the hold have it. Any two majorities share a master, and that
// master's acquire script returns more than the counter it holds, so the next
// token is larger. This holds while a majority keeps its data: the write-back
// goes to every master (awaited on a majority only), so one master restarted
// empty is covered by the others, but a majority that lost its data is
// covered only by the clock floor (see Fencing). ClaimFenced succeeds where
// a majority's counter is the token.
//
// Cost: a fresh acquisition is two round trips, each to every master in
// parallel: acquire, and the token's write-back, because the masters' tokens
// nearly always differ (each counter is floored by its own clock). A release
// and a renewal are one; a re-entry, none. On 3 masters an uncontended acquisition
// and release of a free key sent 8 script calls and ran 48 commands over
// the masters (2 of those calls write the token back), against 2 and 14 on
// one server, and took 2 to 2.6 times as long on loopback
// (BenchmarkQuorumAcquireRelease). A hand-off costs the waiter an
// acquisition (two round trips) after the release, where one server grants
// the key with the release.
//
// Clock assumptions: those of one server, for each master. The masters'
// clocks need not agree with each other or with the client's, but each must
// run at about the client's rate (the drift allowance), and a forward step of
// one master's clock shortens the holds on it.
//
// Where only fencing protects the data: a holder paused past its stop
// grace; a master that restarts without its data while a lease is held,
// since it can then grant the key again and make a second majority with a
// master that never held it (keep a restarted master out for a TTL, or
// persist with appendfsync always, as Redlock advises); and a clock that
// jumps. Redlock's exclusion rests on these timing assumptions; the order of
// its tokens does not.
//
// # Lifecycle
//
// A Locker runs two heartbeat goroutines from New until Close, two
// goroutines that carry requests (started on first use) and, while requests
// come faster than those carry them, up to 62 more, each of which ends after
// a second without one, so that a burst's requests run on goroutines whose
// stacks have grown already; and one
// subscription connection while any acquisition waits (on Cluster, one per
// hash slot with waiting acquisitions, since go-redis resubscribes a
// connection's channels in one SSUBSCRIBE, which must not cross slots; one
// per master on a quorum, where each request to a master also runs on a
// goroutine of its own). Close cancels the
// contexts of the leases it still holds (cause ErrClosed), keeps renewing
// them while their jobs return and release them, for up to WithCloseTimeout
// (default: the TTL), and leaves any still held then to expire in Redis: it
// never deletes a key under a running job. It then waits for requests still
// on the wire, which go-redis bounds by its read timeout.
//
// Outside Cluster, up to eight acquisitions and releases of a Locker
// travel at once, each on a connection of its own; those that come
// meanwhile go together, as one pipeline, when the first of the eight is
// answered. So a busy process costs Redis one read and one write per
// flight rather than per request. Each is still its own atomic script
// call; a waiting request gives up when its context is done, unsent, and a
// shared flight ends by the earliest deadline among its requests. go-redis
// hooks see a shared flight as a pipeline, under the context of one of its
// requests. Renewals, and acquisitions that wait for replicas
// (WithReplicaAck), travel in pipelines of their own, as before.
//
// Every call returns when its context is done, also when the server is
// unreachable, and also while another call of the same Locker is stuck on
// the same fault: no lock of a Locker is held across a request, and every
// wait (for a request, a subscription, another lease's count update) ends
// with the caller's context. Requests run on goroutines of the Locker and
// are bounded by the request timeout (WithRequestTimeout, default TTL/10)
// whatever the context, so a single try (Wait(0)) under a context that is
// never done gives up after that timeout when Redis does not answer, not
// after go-redis's dial retries. A request its caller stopped waiting for
// goes on within that bound, and what it may have done is undone (an
// acquisition that took the key after its caller gave up drops it). Release
// waits for Redis's answer until its context is done and the release goes
// on without it; called with a context that is already done (a deferred
// Release after shutdown canceled the job's context), it waits for the
// answer up to the request timeout. WithLock returns once its release is
// answered, bounded the same way. The release itself is sent by a
// goroutine of the Locker. When go-redis ends each try by itself soon
// enough that Close cannot give up on the hold first (by its read and write
// timeouts, on by default, after the request timeout; or by the deadline,
// with ContextTimeoutEnabled), that goroutine waits for the answer;
// otherwise a goroutine of its own does, so that the sender gives up at the
// request timeout. Either way an answer that comes after the request
// timeout is not taken.
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
// # Seeing locks
//
// Each hold records who took it (WithIdentity, default "hostname/pid").
// Inspect reads a lock at one instant of the server's clock: each holder's
// identity, mode, lease counts, time left and fencing token, holds kept for
// MinHold, the waiting acquisitions and the fencing counter. Scan does the
// same for every lock under the prefix, walking the keyspace with SCAN (every
// master of a Cluster). ForceRelease is an operator's override: it deletes
// every hold on a key and wakes its waiters; a holder learns it at its next
// renewal, when its lease context is canceled with ErrLeaseLost, and the
// fencing counter goes on, so the next token is higher. The guardctl command
// (github.com/jobguard/jobguard/cmd/guardctl) is built on these.
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
// Inspect lists each permit holder as a write holder with its identity, the
// waiting acquisitions with them, and the key's n as LockState.Permits. A
// quorum (NewQuorum) refuses Permits(n) for n > 1 with ErrInvalid: each
// master would admit n holders, and n+1 holders can each hold a majority
// (three masters, n = 2: one holder on masters 1 and 2, one on 2 and 3, one
// on 1 and 3), so majority votes do not bound the fleet by n.
//
// # Waiting
//
// A waiting acquisition sleeps until a release is published on the lock's
// channel. Each waiting acquisition is registered in the lock's queue, and
// a release that frees the key hands it to the oldest registered writer
// itself: the release takes the key for that waiter (with a fresh fencing
// token) and the message carries the grant, so the waiter returns without
// another round trip and a hand-off costs two requests in the whole fleet,
// the waiter's busy attempt and the holder's release. The waiter counts its
// lease from when its last attempt was sent, which precedes the grant, and
// makes one more attempt (which extends the hold) when that was more than a
// renew interval ago. A grant to a waiter that gave up is dropped by it; one
// to a waiter that crashed blocks the key no longer than the waiter's TTL:
// the release tells every Locker how long the grant lasts, and the other
// Lockers' first waiters try when it would have expired (a grantee that is
// alive has renewed it by then, and they sleep again).
// Readers are not granted the key: a release names the Locker of the oldest
// registration, whose first waiter tries, and readers that can share the
// key are let in together; a release that cannot free the key (others still
// hold it, MinHold) names one too. If the named Locker does not take the
// key within 50ms (it crashed, or its waiters gave up), the others try.
// The queue is ordered by when each registration expires: an attempt
// renews its registration for twice its TTL, at the back, and a waiter
// attempts at least once per TTL, so waiting is roughly least recently
// refreshed first, not strictly first-come, first-served, and a waiter with
// a shorter TTL goes ahead of one with a longer; a stream of readers can
// hold off a writer. A grantee that never hears its grant (its
// subscription is broken) keeps the key until its own attempt, at the
// latest one TTL later, finds it already its own; a subscription
// connection that goes silent without being closed (half-open, as when a
// firewall on the path drops its state) is noticed by an unanswered ping
// and replaced within about 7s, and its waiters then try again, since a
// release may have been missed. A waiter is never woken by what it did
// itself: a hold it took and could not use (a split vote on a quorum) is
// dropped with a message that wakes the others, not it. Writers of a
// Locker with WithReplicaAck are named, not granted: a release does not
// wait for replicas.
package guard

// Reading the code: the lease protocol in the order a WithLock runs it.
//
//	locker.go      Locker, New, the public calls, WithLock's run, Close (quorum.go: NewQuorum)
//	acquire.go     one acquisition: re-entry, attempts, the wait between them
//	hold.go        the hold a lease shares with its re-entries, and its end
//	counts.go      the hold's lease counts, carried to Redis one update at a time
//	heartbeat.go   when to renew, when to tell a job to stop (timing.go: the rules)
//	renewal.go     sending renewals in pipelines per node, applying answers
//	release.go     releasing a lease, retried safely
//	notify.go      waking waiters on release notices (subscribe.go: each connection's worker)
//	inspect.go     seeing locks: Inspect, Scan, LockState; force_release.go: ForceRelease
//	lease.go, claim.go, claim_fenced.go, charge.go, eviction.go, identity.go,
//	options.go, errors.go, observe.go, runner.go: the rest
//
// Below the seam (internal/store: what the Locker asks of where leases live,
// in typed values; no Redis reply, script or message format crosses it):
//
//	internal/redisstore   one Redis deployment: one typed call per script
//	                      (scripts/*.lua, prelude.lua explains the hash a lock
//	                      is), the feeds, inspection, the registration and
//	                      notice formats
//	internal/quorumstore  N masters (NewQuorum): a redisstore each, answers
//	                      combined by majority
//	internal/clock        the time everything above schedules by
