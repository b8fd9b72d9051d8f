// Package chaos is the fault-injection suite of jobguard (issue #15): the
// library its tests use to run workers, record what they did, inject faults
// on a seeded schedule and check the result.
//
// A worker (RunWorker, run as a separate OS process by the test binary)
// loops: it takes a lease on a shared lock key with guard, does a slow
// read-modify-write of a shared counter on a resource Redis that no fault
// touches, and appends every step to its history, one JSON Event per line.
// The counter is fenced with the lease's token on both sides of the
// read-modify-write: the read is fence.Redis.Get, which raises the key's
// fence to the token, and the write is fence.Redis.Set. Fencing the write
// alone does not protect a read-modify-write: a stale holder that read
// before a newer holder and writes after the newer holder's read but before
// its write is accepted, and the newer write then loses its update. This
// suite found that gap (fence had no fenced read); fence.Redis.Get closes
// it.
//
// Check reads the histories of one group of workers, with the faults the
// schedule injected. Whether the group's history is a violation is decided
// by porcupine (github.com/anishathalye/porcupine), a linearizability
// checker (Linearizability): every fenced read and write becomes an
// operation called and returned at its events' Wall times (a read is
// called at its read_sent event, just before its request, a write at its
// write event), and
// the final value of the counter a last read after every other. An
// operation whose outcome the worker never learnt (an error, or a worker
// killed before the answer) returns at the end of the history and may have
// been applied or not. The history is checked against two sequential
// specifications of a resource holding a fence (the highest token
// accepted) and a counter:
//
//   - the register: an operation with a token at or above the fence is
//     accepted and raises the fence to its token, one below is refused and
//     changes nothing, an accepted read returns the last accepted write's
//     value;
//   - the lease: the register, and every accepted write read the value of
//     the accepted write before it, so that two fenced read-modify-writes
//     under the lock never interleave and no update is lost.
//
// A history either model rejects, or that porcupine cannot decide within
// CheckTimeout, fails the suite; its visualization (porcupine.VisualizePath)
// is written to Group.VisualizeDir, the report's directory. Check also
// reports per fault kind: operations, accepted writes, stale writes
// rejected by fencing, the violations of the hand-written checker that came
// before porcupine (accepted writes that do not form one chain, or a final
// value that is not the last accepted write's; reported beside porcupine's
// verdict, with any disagreement, but no longer failing the suite), leases
// lost and whether each job was told (its context canceled) before another
// owner acquired, and the time from each fault's end to the next accepted
// write. WriteReport writes report.json and report.md.
//
// # Faults
//
// Standalone: the holder SIGSTOPped past its TTL, its link black-holed or
// slowed, the holder SIGKILLed, the server SIGKILLed and restarted without
// and with AOF. Sentinel: a failover with and without replica ack.
// Cluster: a master SIGKILLed and its replica promoted. Redlock: one of
// three masters SIGSTOPped past the TTL, or SIGKILLed and restarted empty.
//
// Issue 28 added faults real fleets meet. standalone-clock: the server's
// wall clock stepped forward and back, by less and by more than the TTL
// (libfaketime). standalone-evict: lock keys evicted under memory pressure
// (a server with maxmemory and allkeys-random, filled by another client
// until the lock's hash and its fencing counter are evicted, then emptied
// of the filler). standalone-operator: guardctl release --force of the
// holder in the middle of its job (Locker.ForceRelease, the call that
// command makes). cluster-reshard: the slot of the workers' key moved to
// another master as an operator's resharding does (CLUSTER SETSLOT
// IMPORTING on the target, MIGRATING on the source, MIGRATE of its keys,
// SETSLOT NODE), at once or left migrating for over a TTL first.
// sentinel-replication: both replicas cut off the master (each told to
// replicate through a black-holed faultproxy) while holders go on, then
// the master SIGKILLed, so that Sentinel promotes a replica without the
// latest leases.
//
// A clock stepped forward past the lease, eviction, force-release, a
// SIGSTOP and a restart or failover that forgets the lease are faults
// where the lock cannot tell the holder before another owner acquires:
// only fencing protects the data there, and a late announcement is
// reported, not failed.
//
// # Running
//
// TestChaos runs every scenario (see Faults) under a profile:
//
//	go test -race ./internal/chaos/                   # -chaos.profile=slice: one fault of each kind, scenarios in parallel, under a minute
//	go test -race -count=1 -timeout 15m -run '^TestChaos$' ./internal/chaos/ \
//		-args -chaos.profile=full -chaos.seed=15 -chaos.out=$PWD/chaos-report
//	go test -race -count=1 -timeout 3h -run '^TestChaos$' ./internal/chaos/ \
//		-args -chaos.profile=long -chaos.duration=1h -chaos.seed=15 -chaos.out=$PWD/chaos-report
//
// (make chaos and make chaos-long run the last two.) The long profile runs
// every scenario at once, as the slice does, each injecting faults from
// its schedule until -chaos.duration after the run began.
//
// -chaos.seed sets the schedule's seed (printed at the start and in the
// report), -chaos.out a directory for report.json, report.md, the
// workers' histories and porcupine's visualization of any history it
// rejects (a relative path is taken from the package directory, where go
// test runs the test; without -chaos.out, visualizations go to
// $TMPDIR/jobguard-chaos), and -chaos.write-fence-only makes workers fence
// only their writes, to show the violations that leaves (the run is then
// expected to fail; its reads are checked as unfenced reads, which raise
// no fence).
package chaos
