package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

// exampleDB opens an SQLite database in a temporary file, as the package
// documentation advises: a busy timeout and BEGIN IMMEDIATE.
func exampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "fence-example")
	if err != nil {
		log.Fatal(err)
	}
	dsn := "file:" + filepath.Join(dir, "app.db") + "?_pragma=busy_timeout(10000)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Two holders of the "invoices" lock write the same table: the one with the
// newer token first, then one whose lease had ended while it was paused.
// Its transaction is refused and rolled back.
func ExampleSQL_Check() {
	db, cleanup := exampleDB()
	defer cleanup()
	ctx := context.Background()

	f, err := fence.NewSQL(db, fence.SQLite) // fence.Postgres, fence.MySQL
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE invoices (id INTEGER PRIMARY KEY, status TEXT)"); err != nil {
		log.Fatal(err)
	}

	// write is a job's write, fenced by the token of its lease.
	write := func(token int64, status string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := f.Check(ctx, tx, "invoices", token); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO invoices (id, status) VALUES (1, ?)", status); err != nil {
			return err
		}
		return tx.Commit()
	}

	fmt.Println("token 8:", write(8, "sent by the new holder"))
	err = write(7, "sent by the paused one")
	fmt.Println("token 7:", err)
	fmt.Println("stale:", errors.Is(err, fence.ErrStale))

	var status string
	if err := db.QueryRowContext(ctx, "SELECT status FROM invoices WHERE id = 1").Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("invoice 1:", status)
	// Output:
	// token 8: <nil>
	// token 7: fence: stale token 7 for "invoices": it has accepted token 8
	// stale: true
	// invoice 1: sent by the new holder
}

// A Redis key written by fenced writers: a lower token cannot overwrite (or
// delete) what a higher one wrote.
func ExampleRedis_Set() {
	m, err := miniredis.Run() // an embedded Redis, so the example runs anywhere
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()

	f := fence.NewRedis(client)
	fmt.Println("token 8:", f.Set(ctx, "report:today", "from the new holder", 8, time.Hour))
	fmt.Println("token 7:", f.Set(ctx, "report:today", "from the paused one", 7, time.Hour))
	fmt.Println("delete with token 7:", f.Del(ctx, "report:today", 7))
	fmt.Println(client.Get(ctx, "report:today").Val())
	// Output:
	// token 8: <nil>
	// token 7: fence: stale token 7 for "report:today": it has accepted token 8
	// delete with token 7: fence: stale token 7 for "report:today": it has accepted token 8
	// from the new holder
}

// A read-modify-write of a counter: the newer holder reads with Get, which
// records its token, so the paused older holder's increment, written
// between that read and the newer holder's Set, is refused instead of being
// overwritten unseen.
func ExampleRedis_Get() {
	m, err := miniredis.Run() // an embedded Redis, so the example runs anywhere
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer client.Close()
	ctx := context.Background()

	f := fence.NewRedis(client)
	_ = f.Set(ctx, "visits", 41, 7, 0)
	old, _, err := f.Get(ctx, "visits", 8) // the newer holder reads
	fmt.Println("read with token 8:", string(old), err)
	fmt.Println("token 7 writes 42:", f.Set(ctx, "visits", 42, 7, 0))
	n, _ := strconv.Atoi(string(old))
	fmt.Println("token 8 writes", n+1, f.Set(ctx, "visits", n+1, 8, 0))
	// Output:
	// read with token 8: 41 <nil>
	// token 7 writes 42: fence: stale token 7 for "visits": it has accepted token 8
	// token 8 writes 42 <nil>
}

// exampleLocker returns a Locker on an embedded Redis and a func that
// closes both.
func exampleLocker() (*guard.Locker, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	locker, err := guard.New(client)
	if err != nil {
		log.Fatal(err)
	}
	return locker, func() { locker.Close(); client.Close(); m.Close() }
}

// The usual shape: the job's write checks the token of the lease it runs
// under, in the transaction that writes.
func ExampleSQL_Check_withLock() {
	db, cleanup := exampleDB()      //docs:hide
	defer cleanup()                 //docs:hide
	locker, stop := exampleLocker() //docs:hide
	defer stop()                    //docs:hide
	ctx := context.Background()     //docs:hide

	f, err := fence.NewSQL(db, fence.SQLite) // or fence.Postgres, fence.MySQL
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil { // creates the table jobguard_fences
		log.Fatal(err)
	}
	_, _ = db.Exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, status TEXT)") //docs:hide
	err = locker.WithLock(ctx, "invoice/42", func(ctx context.Context) error {
		token, _ := guard.TokenFrom(ctx, "invoice/42")
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := f.Check(ctx, tx, "invoice/42", token); err != nil {
			return err // errors.Is(err, fence.ErrStale): a newer holder has written
		}
		// ... the writes, in tx ...
		if _, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO invoices VALUES (42, 'sent')"); err != nil { //docs:hide
			return err //docs:hide
		} //docs:hide
		return tx.Commit()
	})
	fmt.Println("invoice 42 sent:", err == nil)
	// Output: invoice 42 sent: true
}
