package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jobguard/jobguard/fence"
	"github.com/redis/go-redis/v9"
)

// guideRedis returns a client on an embedded Redis, so the examples run
// anywhere; use your own redis.NewClient (or a Sentinel or Cluster client).
func guideRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return client, func() { client.Close(); m.Close() }
}

// guideInvoices creates the table ExampleNewSQL writes.
func guideInvoices(db *sql.DB) {
	if _, err := db.Exec("CREATE TABLE invoices (id INTEGER PRIMARY KEY, status TEXT)"); err != nil {
		log.Fatal(err)
	}
}

// The shape of a fenced SQL write: Check first, inside the transaction that
// writes, and commit only if it passed.
func ExampleNewSQL() {
	db, cleanup := exampleDB()         //docs:hide
	defer cleanup()                    //docs:hide
	ctx := context.Background()        //docs:hide
	guideInvoices(db)                  //docs:hide
	var token int64 = 1795467173098060 //docs:hide

	f, err := fence.NewSQL(db, fence.SQLite) // fence.Postgres, fence.MySQL; fence.Table(name) to rename
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Migrate(ctx); err != nil { // creates jobguard_fences if missing
		log.Fatal(err)
	}

	write := func(ctx context.Context, token int64) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := f.Check(ctx, tx, "invoice/42", token); err != nil {
			return err // errors.Is(err, fence.ErrStale): a newer holder has written
		}
		if _, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO invoices VALUES (42, 'sent')"); err != nil {
			return err
		}
		return tx.Commit()
	}
	fmt.Println(write(ctx, token))
	// Output: <nil>
}

// Set and Del refuse a token lower than the last one the key accepted.
func ExampleNewRedis() {
	client, stop := guideRedis() //docs:hide
	defer stop()                 //docs:hide
	ctx := context.Background()  //docs:hide

	f := fence.NewRedis(client) // standalone, Sentinel or Cluster
	err := f.Set(ctx, "report:today", "from the new holder", 8, 24*time.Hour)
	fmt.Println("token 8 writes:", err)
	err = f.Set(ctx, "report:today", "from the paused one", 7, 24*time.Hour)
	fmt.Println("token 7 refused:", errors.Is(err, fence.ErrStale))
	err = f.Del(ctx, "report:today", 7)
	fmt.Println("token 7 cannot delete:", errors.Is(err, fence.ErrStale))
	// Output:
	// token 8 writes: <nil>
	// token 7 refused: true
	// token 7 cannot delete: true
}

// A read-modify-write reads with Get, which records the reader's token. A
// holder with an older token, woken from a pause, is refused, and learns
// who overtook it from the *StaleError.
func ExampleStaleError() {
	client, stop := guideRedis()       //docs:hide
	defer stop()                       //docs:hide
	ctx := context.Background()        //docs:hide
	f := fence.NewRedis(client)        //docs:hide
	_ = f.Set(ctx, "visits", 41, 7, 0) //docs:hide

	// The newer holder, token 8, reads: Get refuses a lower token and records this one.
	const token = 8
	old, _, err := f.Get(ctx, "visits", token)
	if err != nil {
		log.Fatal(err)
	}
	n, _ := strconv.Atoi(string(old))

	// Meanwhile the older holder (token 7) wakes up and writes.
	err = f.Set(ctx, "visits", 999, 7, 0)
	var stale *fence.StaleError
	if errors.As(err, &stale) { // drop the work; do not retry with this token
		fmt.Printf("%q refused token %d: it has accepted %d\n", stale.Resource, stale.Token, stale.Newer)
	}

	err = f.Set(ctx, "visits", n+1, token, 0) // refused if a newer holder read or wrote since
	fmt.Println("token 8 writes", n+1, err)
	// Output:
	// "visits" refused token 7: it has accepted 8
	// token 8 writes 42 <nil>
}
