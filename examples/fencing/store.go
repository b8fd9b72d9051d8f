package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jobguard/jobguard/fence"
	_ "modernc.org/sqlite"
)

// store is the database the workers write to: the invoices table and the
// fence that guards it.
type store struct {
	name    string // what it is, for the story
	db      *sql.DB
	dialect fence.Dialect
	fence   *fence.SQL
	cleanup func()
}

// openStore opens the database in DATABASE_URL, or an SQLite database in a
// temporary directory, and creates the example's tables.
func openStore(ctx context.Context) (*store, error) {
	s, err := open(os.Getenv("DATABASE_URL"))
	if err != nil {
		return nil, err
	}
	if err := s.setUp(ctx); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func open(rawURL string) (*store, error) {
	s := &store{cleanup: func() {}}
	var driver, dsn string
	u, err := url.Parse(rawURL)
	switch {
	case rawURL == "":
		dir, err := os.MkdirTemp("", "jobguard-fencing")
		if err != nil {
			return nil, err
		}
		s.cleanup = func() { os.RemoveAll(dir) }
		s.name, driver, s.dialect = "embedded SQLite", "sqlite", fence.SQLite
		dsn = sqliteDSN(filepath.Join(dir, "fencing.db"))
	case err != nil:
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	case u.Scheme == "postgres" || u.Scheme == "postgresql":
		s.name, driver, s.dialect, dsn = "PostgreSQL", "pgx", fence.Postgres, rawURL
	case u.Scheme == "mysql":
		cfg := mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net, cfg.Addr = "tcp", u.Host
		cfg.DBName = strings.TrimPrefix(u.Path, "/")
		s.name, driver, s.dialect, dsn = "MySQL/MariaDB", "mysql", fence.MySQL, cfg.FormatDSN()
	case u.Scheme == "sqlite":
		s.name, driver, s.dialect, dsn = "SQLite", "sqlite", fence.SQLite, sqliteDSN(u.Path)
	default:
		return nil, errors.New("DATABASE_URL: want postgres://, mysql:// or sqlite:///path, or leave it unset for an embedded SQLite")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		s.cleanup()
		return nil, err
	}
	s.db = db
	return s, nil
}

// sqliteDSN opens path with a busy timeout and BEGIN IMMEDIATE, as
// fence's documentation advises, so that concurrent writers wait for each
// other instead of failing with SQLITE_BUSY.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_txlock=immediate"
}

// setUp creates the fence's table and the invoices table, with invoice 1
// as a draft.
func (s *store) setUp(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("%s: %w", s.name, err)
	}
	f, err := fence.NewSQL(s.db, s.dialect, fence.Table("jobguard_example_fences"))
	if err != nil {
		return err
	}
	s.fence = f
	s.dropTables(ctx) // left over by an interrupted run
	if err := f.Migrate(ctx); err != nil {
		return err
	}
	for _, stmt := range []string{
		"CREATE TABLE jobguard_example_invoices (id INTEGER PRIMARY KEY, status VARCHAR(100) NOT NULL, token BIGINT NOT NULL)",
		"INSERT INTO jobguard_example_invoices (id, status, token) VALUES (1, 'draft', 0)",
	} {
		if _, err := s.db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

func (s *store) dropTables(ctx context.Context) {
	for _, t := range []string{"jobguard_example_invoices", "jobguard_example_fences"} {
		s.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t)
	}
}

// close drops the example's tables and closes the database.
func (s *store) close() {
	s.dropTables(context.Background())
	s.db.Close()
	s.cleanup()
}

// q rewrites the ? placeholders of query for PostgreSQL ($1, $2, ...).
func (s *store) q(query string) string {
	if s.dialect != fence.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
