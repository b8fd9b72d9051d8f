package fence

import (
	"fmt"
	"strings"
)

// Dialect is the SQL dialect of the database a SQL fence writes to. Its
// zero value is no dialect: NewSQL refuses it.
type Dialect int

// The dialects NewSQL accepts.
const (
	// Postgres is PostgreSQL 9.5 or later (INSERT ... ON CONFLICT).
	Postgres Dialect = iota + 1
	// MySQL is MySQL 5.7 or later and MariaDB 10.2 or later, with InnoDB
	// tables.
	MySQL
	// SQLite is SQLite 3.35 or later (upsert with RETURNING).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// statements are the SQL a fence runs on one table in one dialect.
//
// check is one upsert that raises the resource's row to the offered token
// when the stored one is not higher, and otherwise leaves it as it is; in
// both cases the statement locks the row until the transaction ends, so a
// concurrent check of the same resource waits for this transaction and then
// judges against what it committed. With returning, check returns the row's
// token only when the condition held (no row: stale). Without it (MySQL),
// read, a locking read of the same row, tells the outcome; with it, read
// only fetches the newer token for the error.
type statements struct {
	create    string
	probe     string // selects every column from no row: the table is usable
	check     string
	read      string
	returning bool
	checkArgs func(resource string, token int64) []any
}

func (d Dialect) statements(table string) (statements, error) {
	t, err := d.quote(table)
	if err != nil {
		return statements{}, err
	}
	s := statements{
		probe:     "SELECT resource, token, updated_at FROM " + t + " WHERE 1 = 0",
		returning: true,
		checkArgs: func(resource string, token int64) []any { return []any{resource, token} },
	}
	switch d {
	case Postgres:
		s.create = "CREATE TABLE IF NOT EXISTS " + t + ` (
	resource text PRIMARY KEY,
	token bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
)`
		// ON CONFLICT DO UPDATE locks the conflicting row also when its
		// WHERE is false, and under READ COMMITTED judges the WHERE against
		// the newest committed version of the row once it has the lock.
		s.check = "INSERT INTO " + t + ` AS f (resource, token, updated_at) VALUES ($1, $2, now())
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = EXCLUDED.updated_at
WHERE f.token <= EXCLUDED.token
RETURNING f.token`
		s.read = "SELECT token FROM " + t + " WHERE resource = $1"
	case MySQL:
		// VARBINARY: byte-wise comparison, so resources differing in case,
		// accents or trailing spaces are distinct rows, whatever the
		// server's default collation.
		s.create = "CREATE TABLE IF NOT EXISTS " + t + ` (
	resource VARBINARY(1020) NOT NULL PRIMARY KEY,
	token BIGINT NOT NULL,
	updated_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`
		// ON DUPLICATE KEY UPDATE takes an exclusive lock on the existing
		// row and computes from its current version (not the transaction's
		// snapshot). updated_at is assigned first, while token is still the
		// stored one. The outcome is read back with a locking read: a plain
		// SELECT under REPEATABLE READ could answer from an older snapshot.
		s.check = "INSERT INTO " + t + ` (resource, token, updated_at) VALUES (?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE updated_at = IF(token <= ?, UTC_TIMESTAMP(6), updated_at), token = GREATEST(token, ?)`
		s.read = "SELECT token FROM " + t + " WHERE resource = ? FOR UPDATE"
		s.returning = false
		s.checkArgs = func(resource string, token int64) []any { return []any{resource, token, token, token} }
	case SQLite:
		s.create = "CREATE TABLE IF NOT EXISTS " + t + ` (
	resource TEXT NOT NULL PRIMARY KEY,
	token INTEGER NOT NULL,
	updated_at TEXT NOT NULL
)`
		// SQLite has one writer at a time: the upsert waits (busy_timeout)
		// for the database's write lock, which it then keeps to the end of
		// the transaction.
		s.check = "INSERT INTO " + t + ` AS f (resource, token, updated_at) VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = excluded.updated_at
WHERE f.token <= excluded.token
RETURNING token`
		s.read = "SELECT token FROM " + t + " WHERE resource = ?1"
	}
	return s, nil
}

// quote returns table (a name, or schema.name) quoted as an identifier of
// the dialect, after checking that each part is a plain identifier.
func (d Dialect) quote(table string) (string, error) {
	var q string
	switch d {
	case Postgres, SQLite:
		q = `"`
	case MySQL:
		q = "`"
	default:
		return "", invalid("unknown dialect %v: use fence.Postgres, fence.MySQL or fence.SQLite", d)
	}
	parts := strings.Split(table, ".")
	if len(parts) > 2 {
		return "", invalid("table name %q: want name or schema.name", table)
	}
	for i, p := range parts {
		if !isIdentifier(p) {
			return "", invalid("table name %q: each part must be 1 to 63 letters, digits or underscores, not starting with a digit", table)
		}
		parts[i] = q + p + q
	}
	return strings.Join(parts, "."), nil
}

// isIdentifier reports whether s is 1 to 63 ASCII letters, digits and
// underscores, not starting with a digit: a name every dialect accepts
// (PostgreSQL truncates longer ones), with nothing to escape.
func isIdentifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
