package fence_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jobguard/jobguard/fence"
	_ "modernc.org/sqlite"
)

// The databases the SQL tests run on. PostgreSQL and MariaDB (or MySQL) are
// services the machine runs; each test gets a schema or database of its own
// and drops it. SQLite runs in-process, in a file of the test's temporary
// directory, once with BEGIN IMMEDIATE transactions (as the package
// documentation advises) and once with deferred ones whose first statement
// is Check.
const (
	postgresEnv     = "JOBGUARD_TEST_POSTGRES"
	postgresDefault = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	mysqlEnv        = "JOBGUARD_TEST_MYSQL"
	mysqlDefault    = "root@tcp(127.0.0.1:3306)/test"
)

// backend is one database to run the SQL tests on.
type backend struct {
	name    string
	dialect fence.Dialect
	// open returns a database handle on a fresh, empty schema or database,
	// dropped when the test ends, or skips (fails under CI=true) when the
	// database cannot be reached.
	open func(t *testing.T) *sql.DB
}

func backends() []backend {
	return []backend{
		{"postgres", fence.Postgres, openPostgres},
		{"mysql", fence.MySQL, openMySQL},
		{"sqlite", fence.SQLite, func(t *testing.T) *sql.DB { return openSQLite(t, "immediate") }},
		{"sqlite-deferred", fence.SQLite, func(t *testing.T) *sql.DB { return openSQLite(t, "deferred") }},
	}
}

// forEach runs test once per backend, as a subtest named after it.
func forEach(t *testing.T, test func(t *testing.T, b backend, db *sql.DB)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { test(t, b, b.open(t)) })
	}
}

// unreachable skips the test, or fails it under CI=true, because the
// database in env could not be reached.
func unreachable(t *testing.T, what, env, dsn string, err error) {
	t.Helper()
	dsn = redact(dsn)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s at %s is unreachable: %v (under CI=true database tests fail instead of skipping; start it, or set %s to the DSN of one)", what, dsn, err, env)
	}
	t.Skipf("%s at %s is unreachable: %v; start it, or set %s to the DSN of one", what, dsn, err, env)
}

// reach remembers, per DSN, whether the server answered, so that an absent
// server costs one connection timeout per test binary, not one per test.
var reach sync.Map // dsn -> error (nil: reachable)

func ping(driver, dsn string) error {
	if v, ok := reach.Load(dsn); ok {
		err, _ := v.(error)
		return err
	}
	db, err := sql.Open(driver, dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		db.Close()
	}
	reach.Store(dsn, err)
	return err
}

// redact hides a password in a PostgreSQL URL or a MySQL DSN.
func redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Redacted()
	}
	if cfg, err := mysql.ParseDSN(dsn); err == nil && cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
		return cfg.FormatDSN()
	}
	return dsn
}

func envOr(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// scratchName returns a fresh lower-case identifier for a schema or
// database.
func scratchName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "fence_test_" + hex.EncodeToString(b)
}

func openPostgres(t *testing.T) *sql.DB {
	t.Helper()
	dsn := envOr(postgresEnv, postgresDefault)
	if err := ping("pgx", dsn); err != nil {
		unreachable(t, "PostgreSQL", postgresEnv, dsn, err)
	}
	admin := mustOpen(t, "pgx", dsn)
	schema := scratchName()
	exec(t, admin, "CREATE SCHEMA "+schema)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s: want a postgres:// URL: %v", postgresEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema) // pgx sends unknown parameters as run-time settings
	u.RawQuery = q.Encode()
	db := mustOpen(t, "pgx", u.String())
	t.Cleanup(func() {
		db.Close()
		exec(t, admin, "DROP SCHEMA "+schema+" CASCADE")
	})
	return db
}

func openMySQL(t *testing.T) *sql.DB {
	t.Helper()
	dsn := envOr(mysqlEnv, mysqlDefault)
	if err := ping("mysql", dsn); err != nil {
		unreachable(t, "MariaDB/MySQL", mysqlEnv, dsn, err)
	}
	admin := mustOpen(t, "mysql", dsn)
	database := scratchName()
	exec(t, admin, "CREATE DATABASE "+database)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("%s: %v", mysqlEnv, err)
	}
	cfg.DBName = database
	db := mustOpen(t, "mysql", cfg.FormatDSN())
	t.Cleanup(func() {
		db.Close()
		exec(t, admin, "DROP DATABASE "+database)
	})
	return db
}

// openSQLite opens a new database file in WAL mode, with a busy timeout
// and txlock ("immediate" or "deferred") as the kind of BEGIN.
func openSQLite(t *testing.T, txlock string) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	dsn := fmt.Sprintf("file:%s?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=%s", path, txlock)
	db := mustOpen(t, "sqlite", dsn)
	t.Cleanup(func() { db.Close() })
	return db
}

func mustOpen(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	if err := db.PingContext(t.Context()); err != nil {
		db.Close()
		t.Fatalf("ping %s: %v", driver, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	// Not t.Context(): cleanups run after it is canceled.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// newFence returns a migrated fence on db.
func newFence(t *testing.T, b backend, db *sql.DB, opts ...fence.SQLOption) *fence.SQL {
	t.Helper()
	f, err := fence.NewSQL(db, b.dialect, opts...)
	if err != nil {
		t.Fatalf("NewSQL: %v", err)
	}
	if err := f.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return f
}

// stored returns the token stored for resource in table, or 0.
func stored(t *testing.T, b backend, db *sql.DB, table, resource string) int64 {
	t.Helper()
	var tok int64
	err := db.QueryRowContext(t.Context(), "SELECT token FROM "+table+" WHERE resource = "+b.arg(1), resource).Scan(&tok)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("read token of %q: %v", resource, err)
	}
	return tok
}

// arg returns the n-th bind parameter in b's dialect.
func (b backend) arg(n int) string {
	if b.dialect == fence.Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}
