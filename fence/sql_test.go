package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/fence"
)

const table = "jobguard_fences" // the default

// check runs Check for token in a transaction of its own and commits it
// when Check passes; it returns Check's error.
func check(t *testing.T, f *fence.SQL, db *sql.DB, resource string, token int64) error {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := f.Check(t.Context(), tx, resource, token); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil {
			t.Fatalf("rollback: %v", rbErr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return nil
}

// A higher token raises the row; an equal one passes, in one transaction
// or in two; the first Check of a resource creates its row.
func TestCheckRaisesAndAcceptsEqual(t *testing.T) {
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		f := newFence(t, b, db)
		const big = int64(1_785_000_000_000_000) // tokens are microsecond timestamps
		for _, tok := range []int64{5, 9, 9, big, big} {
			if err := check(t, f, db, "job", tok); err != nil {
				t.Fatalf("Check(%d): %v", tok, err)
			}
			if got := stored(t, b, db, table, "job"); got != tok {
				t.Fatalf("after Check(%d) the row holds %d", tok, got)
			}
		}
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for range 2 { // the same hold writing twice in one transaction
			if err := f.Check(t.Context(), tx, "job", big); err != nil {
				t.Fatalf("Check with an equal token in one transaction: %v", err)
			}
		}
		if err := f.Check(t.Context(), tx, "other", 1); err != nil {
			t.Fatalf("Check of another resource: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// A stale token is refused with a StaleError naming the resource and both
// tokens, and the caller's rollback undoes the transaction's writes.
func TestStaleTokenRefusedAndRolledBack(t *testing.T) {
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		f := newFence(t, b, db)
		exec(t, db, "CREATE TABLE items (id INTEGER PRIMARY KEY, v VARCHAR(20) NOT NULL)")
		exec(t, db, "INSERT INTO items (id, v) VALUES (1, 'none')")
		write := func(tx *sql.Tx, v string) {
			t.Helper()
			if _, err := tx.ExecContext(t.Context(), "UPDATE items SET v = "+b.arg(1)+" WHERE id = 1", v); err != nil {
				t.Fatalf("write %s: %v", v, err)
			}
		}
		// The newer holder writes first.
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Check(t.Context(), tx, "items/1", 8); err != nil {
			t.Fatalf("Check(8): %v", err)
		}
		write(tx, "eight")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}

		// The older one wakes up, writes, and is refused at the check.
		tx, err = db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		write(tx, "seven")
		err = f.Check(t.Context(), tx, "items/1", 7)
		if !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Check(7) after 8: %v, want ErrStale", err)
		}
		var se *fence.StaleError
		if !errors.As(err, &se) || *se != (fence.StaleError{Resource: "items/1", Token: 7, Newer: 8}) {
			t.Errorf("error %#v, want a StaleError for items/1, 7 and 8", err)
		}
		for _, want := range []string{`"items/1"`, "7", "8", "stale"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("message %q does not name %s", err, want)
			}
		}
		if errors.Is(err, fence.ErrInvalid) {
			t.Errorf("a stale token matches ErrInvalid: %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatalf("rollback: %v", err)
		}

		var v string
		if err := db.QueryRowContext(t.Context(), "SELECT v FROM items WHERE id = 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "eight" {
			t.Errorf("item holds %q after the stale transaction rolled back, want eight", v)
		}
		if got := stored(t, b, db, table, "items/1"); got != 8 {
			t.Errorf("the fence holds %d, want 8", got)
		}
	})
}

// A second Check of a resource, issued while the transaction of the first
// is still open, waits for that transaction to end and then judges against
// what it committed: 8 after 7 passes, 7 after 8 fails, and nothing the
// first rolled back counts.
func TestInterleavedChecksWaitForTheFirst(t *testing.T) {
	cases := []struct {
		name          string
		first, second int64
		commit        bool // how the first transaction ends
		stale         bool // the second Check's outcome
		final         int64
		readFirst     bool // the second transaction reads the table before Check
	}{
		{"8 after 7 passes", 7, 8, true, false, 8, false},
		{"7 after 8 is stale", 8, 7, true, true, 8, false},
		{"equal token passes", 7, 7, true, false, 7, false},
		{"7 after 8 rolled back passes", 8, 7, false, false, 7, false},
		{"8 after 7 rolled back passes", 7, 8, false, false, 8, false},
		// A snapshot taken before the first transaction committed (InnoDB's
		// REPEATABLE READ) must not hide the newer token.
		{"7 after 8 is stale despite an older snapshot", 8, 7, true, true, 8, true},
	}
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		f := newFence(t, b, db)
		if err := check(t, f, db, "job", 3); err != nil { // an existing row
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				// SQLite cannot turn a transaction that has read into one
				// that writes while another writes (the package
				// documentation says to Check first or BEGIN IMMEDIATE):
				// that Check fails at once with SQLITE_BUSY, so nothing
				// stale commits either.
				busy := c.readFirst && b.name == "sqlite-deferred"
				resource := "job"
				if c.name == "8 after 7 passes" {
					resource = "new-job" // also when the first Check inserts the row
				}
				tx1, err := db.BeginTx(t.Context(), nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx1.Rollback()
				if err := f.Check(t.Context(), tx1, resource, c.first); err != nil {
					t.Fatalf("first Check(%d): %v", c.first, err)
				}

				type outcome struct {
					tx  *sql.Tx
					err error
				}
				done := make(chan outcome, 1)
				var wg sync.WaitGroup
				defer wg.Wait()
				wg.Go(func() {
					tx2, err := db.BeginTx(t.Context(), nil) // waits here in SQLite with BEGIN IMMEDIATE
					if err == nil && c.readFirst {
						var n int
						err = tx2.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n)
					}
					if err == nil {
						err = f.Check(t.Context(), tx2, resource, c.second)
					}
					done <- outcome{tx2, err}
				})
				select {
				case o := <-done:
					if o.tx != nil {
						o.tx.Rollback()
					}
					if busy && o.err != nil && strings.Contains(o.err.Error(), "SQLITE_BUSY") {
						return // and the deferred Rollback ends the first
					}
					t.Fatalf("second Check(%d) returned %v while the first transaction was open; want it to wait", c.second, o.err)
				case <-time.After(300 * time.Millisecond):
				}

				if c.commit {
					err = tx1.Commit()
				} else {
					err = tx1.Rollback()
				}
				if err != nil {
					t.Fatalf("end first transaction: %v", err)
				}
				var o outcome
				select {
				case o = <-done:
				case <-time.After(30 * time.Second):
					t.Fatal("second Check still waiting 30s after the first transaction ended")
				}
				if o.tx == nil {
					t.Fatalf("begin second transaction: %v", o.err)
				}
				var se *fence.StaleError
				switch {
				case busy:
					t.Errorf("second Check(%d) after a read waited and returned %v, want SQLITE_BUSY at once", c.second, o.err)
				case c.stale && !(errors.As(o.err, &se) && se.Token == c.second && se.Newer == c.first):
					t.Errorf("second Check(%d): %v, want stale against %d", c.second, o.err, c.first)
				case !c.stale && o.err != nil:
					t.Errorf("second Check(%d): %v, want it to pass", c.second, o.err)
				}
				if o.err == nil {
					err = o.tx.Commit()
				} else {
					err = o.tx.Rollback()
				}
				if err != nil {
					t.Fatalf("end second transaction: %v", err)
				}
				if got := stored(t, b, db, table, resource); got != c.final {
					t.Errorf("the fence holds %d, want %d", got, c.final)
				}
				// Reset for the next case: equal tokens pass, so raise to
				// a value above every case's and start over on a new row.
				exec(t, db, "DELETE FROM "+table+" WHERE resource = "+b.arg(1), resource)
				if err := check(t, f, db, resource, 3); err != nil {
					t.Fatal(err)
				}
			})
		}
	})
}

// Several writers draw increasing tokens but reach the database in a
// shuffled order, each doing a read-modify-write of a counter and appending
// to a ledger after Check. Whatever the interleaving, no committed write is
// lost and no token commits after a higher one.
func TestConcurrentWritersNeverCommitStale(t *testing.T) {
	const workers, rounds = 8, 40
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		f := newFence(t, b, db)
		exec(t, db, "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
		exec(t, db, "INSERT INTO counter (id, n) VALUES (1, 0)")
		exec(t, db, "CREATE TABLE ledger (seq INTEGER PRIMARY KEY, token BIGINT NOT NULL)")

		next := atomic.Int64{}
		next.Store(1_785_000_000_000_000)
		var commits, stales atomic.Int64
		var maxRefused atomic.Int64
		write := func(ctx context.Context, token int64) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if err := f.Check(ctx, tx, "counter", token); err != nil {
				return err
			}
			var n int64 // a read-modify-write: lost updates show here
			if err := tx.QueryRowContext(ctx, "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE counter SET n = "+b.arg(1)+" WHERE id = 1", n+1); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (seq, token) VALUES ("+b.arg(1)+", "+b.arg(2)+")", n+1, token); err != nil {
				return err
			}
			return tx.Commit()
		}
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range rounds {
					token := next.Add(1)
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) // reorder the writers
					err := write(t.Context(), token)
					switch {
					case err == nil:
						commits.Add(1)
					case errors.Is(err, fence.ErrStale):
						stales.Add(1)
						for m := maxRefused.Load(); token > m && !maxRefused.CompareAndSwap(m, token); m = maxRefused.Load() {
						}
					default:
						t.Errorf("write with token %d: %v", token, err)
						return
					}
				}
			})
		}
		wg.Wait()

		var n int64
		if err := db.QueryRowContext(t.Context(), "SELECT n FROM counter WHERE id = 1").Scan(&n); err != nil {
			t.Fatal(err)
		}
		rows, err := db.QueryContext(t.Context(), "SELECT seq, token FROM ledger ORDER BY seq")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var entries, staleCommits int64
		var last int64
		for rows.Next() {
			var seq, token int64
			if err := rows.Scan(&seq, &token); err != nil {
				t.Fatal(err)
			}
			entries++
			if token < last {
				staleCommits++
				t.Errorf("ledger entry %d: token %d committed after %d", seq, token, last)
			}
			last = max(last, token)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		lost := commits.Load() - n
		t.Logf("%d transactions: %d committed, %d refused as stale; %d lost updates, %d stale commits",
			workers*rounds, commits.Load(), stales.Load(), lost, staleCommits)
		if commits.Load()+stales.Load() != workers*rounds {
			t.Errorf("%d commits and %d stale refusals, want %d in all", commits.Load(), stales.Load(), workers*rounds)
		}
		if lost != 0 || entries != commits.Load() {
			t.Errorf("counter %d and %d ledger entries after %d commits", n, entries, commits.Load())
		}
		if stales.Load() == 0 {
			t.Errorf("no writer was refused: the test did not interleave tokens")
		}
		if got := stored(t, b, db, table, "counter"); got != last {
			t.Errorf("the fence holds %d, the last committed token is %d", got, last)
		}
		if m := maxRefused.Load(); m >= last {
			t.Errorf("token %d was refused but the highest committed is %d", m, last)
		}
	})
}

// Migrate creates the table once and is a no-op afterwards, also when
// several processes run it at once; it reports a table of the same name
// that is not a fences table.
func TestMigrateIsIdempotent(t *testing.T) {
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		f := newFence(t, b, db)
		if err := check(t, f, db, "job", 5); err != nil {
			t.Fatal(err)
		}
		if err := f.Migrate(t.Context()); err != nil {
			t.Fatalf("second Migrate: %v", err)
		}
		if got := stored(t, b, db, table, "job"); got != 5 {
			t.Errorf("after a second Migrate the fence holds %d, want 5", got)
		}

		custom, err := fence.NewSQL(db, b.dialect, fence.Table("my_fences"))
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { errs[i] = custom.Migrate(t.Context()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("concurrent Migrate %d: %v", i, err)
			}
		}
		if err := check(t, custom, db, "job", 2); err != nil {
			t.Fatalf("Check on my_fences: %v", err)
		}
		if got := stored(t, b, db, "my_fences", "job"); got != 2 {
			t.Errorf("my_fences holds %d, want 2", got)
		}

		exec(t, db, "CREATE TABLE not_fences (resource VARCHAR(20) PRIMARY KEY, other INTEGER)")
		wrong, err := fence.NewSQL(db, b.dialect, fence.Table("not_fences"))
		if err != nil {
			t.Fatal(err)
		}
		if err := wrong.Migrate(t.Context()); err == nil || !strings.Contains(err.Error(), "not_fences") {
			t.Errorf("Migrate on a table of another shape: %v, want an error naming it", err)
		}
	})
}

// Bad arguments get an error matching ErrInvalid that says what is wrong,
// before anything reaches the database.
func TestBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, b backend, db *sql.DB) {
		for _, c := range []struct {
			name string
			db   *sql.DB
			d    fence.Dialect
			opts []fence.SQLOption
			want string
		}{
			{"nil db", nil, b.dialect, nil, "nil *sql.DB"},
			{"zero dialect", db, 0, nil, "unknown dialect"},
			{"unknown dialect", db, fence.Dialect(99), nil, "unknown dialect Dialect(99)"},
			{"empty table", db, b.dialect, []fence.SQLOption{fence.Table("")}, "table name"},
			{"table with space", db, b.dialect, []fence.SQLOption{fence.Table("my fences")}, "table name"},
			{"table with quote", db, b.dialect, []fence.SQLOption{fence.Table(`x"; DROP TABLE y; --`)}, "table name"},
			{"table starting with digit", db, b.dialect, []fence.SQLOption{fence.Table("1fences")}, "table name"},
			{"three-part table", db, b.dialect, []fence.SQLOption{fence.Table("a.b.c")}, "schema.name"},
			{"table too long", db, b.dialect, []fence.SQLOption{fence.Table(strings.Repeat("t", 64))}, "table name"},
			{"nil option", db, b.dialect, []fence.SQLOption{nil}, "nil option"},
		} {
			f, err := fence.NewSQL(c.db, c.d, c.opts...)
			if f != nil || !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewSQL with %s: %v, want ErrInvalid saying %q", c.name, err, c.want)
			}
		}

		f := newFence(t, b, db)
		tx, err := db.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var nilCtx context.Context
		var nilFence *fence.SQL
		for _, c := range []struct {
			name     string
			f        *fence.SQL
			ctx      context.Context
			tx       *sql.Tx
			resource string
			token    int64
			want     string
		}{
			{"empty resource", f, t.Context(), tx, "", 1, "empty resource"},
			{"zero token", f, t.Context(), tx, "job", 0, "token 0"},
			{"negative token", f, t.Context(), tx, "job", -7, "token -7"},
			{"nil tx", f, t.Context(), nil, "job", 1, "nil transaction"},
			{"nil ctx", f, nilCtx, tx, "job", 1, "nil context"},
			{"nil fence", nilFence, t.Context(), tx, "job", 1, "nil fence"},
			{"invalid UTF-8", f, t.Context(), tx, "job\xff", 1, "UTF-8"},
			{"NUL", f, t.Context(), tx, "job\x00", 1, "NUL"},
			{"256 characters", f, t.Context(), tx, strings.Repeat("é", 256), 1, "at most 255"},
		} {
			err := c.f.Check(c.ctx, c.tx, c.resource, c.token)
			if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Check with %s: %v, want ErrInvalid saying %q", c.name, err, c.want)
			}
		}
		// The longest resource fits every dialect's column: 255 four-byte
		// characters. The transaction is still usable after the refusals.
		long := strings.Repeat("😀", 255)
		if err := f.Check(t.Context(), tx, long, 1); err != nil {
			t.Errorf("Check of a 255-character resource: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := stored(t, b, db, table, long); got != 1 {
			t.Errorf("the 255-character resource's row holds %d, want 1", got)
		}
		if err := nilFence.Migrate(t.Context()); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("Migrate on a nil fence: %v, want ErrInvalid", err)
		}
	})
}
