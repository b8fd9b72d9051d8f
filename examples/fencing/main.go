// Fencing shows what a fencing token is for. Two workers run the same job
// under one lock; the first is frozen past its lease (as a long GC pause, a
// SIGSTOP or a VM migration would leave it), the second takes the lock over
// and writes, and then the first wakes up, still believing it holds the
// lock, and tries to write too. The lock cannot stop it; the database can:
// fence.SQL checks the token inside the write's transaction and refuses the
// stale one.
//
// It writes to an embedded SQLite database by default, or to the database
// in DATABASE_URL (postgres://..., mysql://user:pass@host:3306/db, or
// sqlite:///path/to/file.db), where it creates two tables,
// jobguard_example_invoices and jobguard_example_fences, and drops them
// when it ends. Redis is embedded too unless REDIS_URL is set.
//
//	go run ./examples/fencing
//	DATABASE_URL=postgres://postgres@127.0.0.1:5432/test go run ./examples/fencing
//	DATABASE_URL=mysql://root@127.0.0.1:3306/test go run ./examples/fencing
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/guard"
)

// job is the lock both workers compete for; invoice is the resource it
// writes, fenced by the lock's tokens.
const (
	job     = "invoice-run"
	invoice = "invoice/1"
)

func main() { exampleenv.Main("fencing", run) }

// run tells the story on out; opts go to both workers' Lockers.
func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	p := exampleenv.NewPrinter(out)
	s, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	p.Say("db", "%s: invoice 1 is %q", s.name, "draft")

	dial, stopRedis, err := exampleenv.Connect()
	if err != nil {
		return err
	}
	defer stopRedis()
	c1, c2 := dial(), dial() // two processes, a connection pool each
	defer c2.Close()
	defer c1.Close()
	w1, err := guard.New(c1, opts...)
	if err != nil {
		return err
	}
	defer w1.Close() // also with its client closed: it stops the Locker's goroutines
	w2, err := guard.New(c2, opts...)
	if err != nil {
		return err
	}
	defer w2.Close()

	// worker-1 takes the lock with a 1s TTL, then freezes mid-job. A frozen
	// process renews nothing: closing its Redis client has the same effect
	// on its lease, so the lock frees itself after the TTL.
	lease, err := w1.Acquire(ctx, job, guard.TTL(time.Second), guard.Wait(0), guard.FenceTTL(time.Minute))
	if err != nil {
		return err
	}
	p.Say("worker-1", "holds %s with fencing token %d; prepares the invoice, then freezes", job, lease.Token())
	c1.Close()
	frozen := time.Now()

	// worker-2 gets the lock once worker-1's lease has expired, and writes.
	err = w2.WithLock(ctx, job, func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, job)
		p.Say("worker-2", "took over %s with fencing token %d", job, token)
		if err := s.write(ctx, token, "sent by worker-2"); err != nil {
			return err
		}
		p.Say("worker-2", "wrote invoice 1 with token %d: accepted", token)
		return nil
	}, guard.Wait(10*time.Second), guard.FenceTTL(time.Minute))
	if err != nil {
		return err
	}

	// worker-1 wakes up. Its lease context was canceled long ago, but a
	// frozen process could not look; it goes on with its old token.
	p.Say("worker-1", "wakes up after %.1fs frozen (its lease context says: %v) and writes with token %d",
		time.Since(frozen).Seconds(), context.Cause(lease.Context()), lease.Token())
	err = s.write(ctx, lease.Token(), "sent by worker-1")
	var stale *fence.StaleError
	if !errors.As(err, &stale) {
		return fmt.Errorf("want the stale write refused with fence.ErrStale, got %v", err)
	}
	p.Say("worker-1", "refused, transaction rolled back: %v", err)
	p.Say("worker-1", "gives up the job: a newer holder (token %d) has written", stale.Newer)

	status, token, err := s.read(ctx)
	if err != nil {
		return err
	}
	p.Say("db", "invoice 1 is %q, written with token %d", status, token)
	return nil
}

// write sets the invoice's status in one transaction, fenced by token.
func (s *store) write(ctx context.Context, token int64, status string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	if err := s.fence.Check(ctx, tx, invoice, token); err != nil {
		return err // fence.ErrStale: roll back, give up
	}
	if _, err := tx.ExecContext(ctx, s.q("UPDATE jobguard_example_invoices SET status = ?, token = ? WHERE id = 1"), status, token); err != nil {
		return err
	}
	return tx.Commit()
}

func (s *store) read(ctx context.Context) (status string, token int64, err error) {
	err = s.db.QueryRowContext(ctx, "SELECT status, token FROM jobguard_example_invoices WHERE id = 1").Scan(&status, &token)
	return status, token, err
}
