// Package fence makes the resource a job writes to refuse writers whose
// lease has ended: it checks the fencing token that guard hands out with
// every lease (guard.TokenFrom, Lease.Token) against the highest token the
// resource has accepted.
//
// A lock cannot stop a holder that was paused (a long GC pause, SIGSTOP, a
// VM migration) or cut off past its lease: it wakes up still believing it
// holds the key while a newer holder is already writing. Tokens strictly
// increase per key, so the resource can tell the two apart, if it checks.
// That check has to happen at the resource, atomically with the write:
// checking first and writing later leaves the same gap the lock had.
//
// # SQL
//
// SQL keeps one row per resource in a fences table (Migrate creates it) and
// checks inside the caller's own transaction:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	defer tx.Rollback()
//	if err := f.Check(ctx, tx, "invoice:42", token); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer holder has written
//	}
//	// ... the writes Check protects ...
//	return tx.Commit()
//
// Check is one conditional upsert: it raises the resource's row to token if
// the stored token is not higher, and leaves it otherwise. Either way the
// row stays locked until the transaction ends, so a concurrent transaction
// checking the same resource waits, then passes with a higher or equal token
// or fails with a lower one. A writer with a lower token therefore never
// commits after one with a higher token, under each database's default
// isolation. Postgres, MySQL (also MariaDB) and SQLite are supported; the
// package imports database/sql and no driver.
//
// SQLite allows one writer at a time. Open it with a busy timeout, so that
// a second writer waits instead of failing with SQLITE_BUSY, and begin write
// transactions with BEGIN IMMEDIATE (modernc.org/sqlite:
// "file:app.db?_pragma=busy_timeout(10000)&_txlock=immediate"), or make
// Check the first statement of the transaction: a transaction that has
// already read and then wants to write cannot wait for the lock (SQLite
// would deadlock) and fails at once with SQLITE_BUSY.
//
// A transaction that fences several resources should Check them in one
// order, or two such transactions can deadlock in the database.
//
// # Redis
//
// Redis guards data keys: Set, Del and Get each run one script that
// compares the caller's token with the last one stored beside the key (in
// the same Cluster slot), refuse a lower one, and otherwise record the token
// and write (or read).
//
//	err := f.Set(ctx, "report:today", body, token, 24*time.Hour)
//
// A read-modify-write reads with Get: it records the token before the
// read, so no older holder can write between the read and the Set. Fencing
// the write alone is not enough there: an older holder that wakes from a
// pause can write after the newer holder's plain read, both writes are
// accepted, and the newer one silently overwrites the older one's update.
//
//	old, _, err := f.Get(ctx, "counter", token)
//	// ... compute next from old ...
//	err = f.Set(ctx, "counter", next, token, 0)
//
// # When Check says stale
//
// ErrStale means a newer holder of the lock has already written: this
// writer's lease ended while it worked. Roll back (Check never does),
// discard the work, and do not retry with the same token: the job is no
// longer this process's. If the job must still run, acquire the lock again
// and redo it with the new token. The error is a *StaleError naming the
// resource, the token and the newer token it lost to; log it.
//
// # Fencing another store
//
// Any store that can compare and write in one atomic step can be fenced
// the same way: keep, per resource, the highest token accepted; a write with
// token t applies only if t is not lower than it, and then records t; the
// comparison, the write and the record form one atomic step (a transaction
// holding the resource's row lock, a conditional put such as DynamoDB's
// ConditionExpression or etcd's Txn comparing a revision, a compare-and-swap
// on a version field, a script). Let an equal token pass, so one hold can
// write twice, and keep the recorded token at least as long as the data it
// guards. A check that is a separate step from the write protects nothing.
package fence
