package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// defaultTable is the fences table's name when no Table option is given.
const defaultTable = "jobguard_fences"

// maxResource is the longest resource name Check accepts, in characters:
// the same names work in every dialect (MySQL's column is VARBINARY(1020),
// four bytes a character at most).
const maxResource = 255

// SQL fences resources kept in a SQL database: Check, inside the caller's
// transaction, lets a write through only if no higher token has been
// accepted for the resource, and holds the resource's row until the
// transaction ends. A SQL is safe for concurrent use.
type SQL struct {
	db      *sql.DB
	dialect Dialect
	table   string
	stmt    statements
}

// SQLOption configures a SQL fence. Options are validated by NewSQL.
type SQLOption func(*sqlConfig)

type sqlConfig struct {
	table string
}

// Table sets the name of the fences table: a name, or schema.name (in
// MySQL, database.name), each part 1 to 63 ASCII letters, digits and
// underscores, not starting with a digit. It is quoted, so it is case
// sensitive where the database is. Default: "jobguard_fences".
func Table(name string) SQLOption {
	return func(c *sqlConfig) { c.table = name }
}

// NewSQL returns a fence on db in dialect d (Postgres, MySQL or SQLite).
// It does not touch the database: call Migrate to create the table. It
// returns an error matching ErrInvalid for a nil db, an unknown dialect or
// a bad table name.
func NewSQL(db *sql.DB, d Dialect, opts ...SQLOption) (*SQL, error) {
	if db == nil {
		return nil, invalid("nil *sql.DB")
	}
	c := sqlConfig{table: defaultTable}
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		o(&c)
	}
	stmt, err := d.statements(c.table)
	if err != nil {
		return nil, err
	}
	return &SQL{db: db, dialect: d, table: c.table, stmt: stmt}, nil
}

// Migrate creates the fences table if it does not exist: one row per
// resource with its highest accepted token and when it was raised
// (resource text primary key, token bigint, updated_at). It then checks
// that the table has those columns, so that it also reports a table of the
// same name made for something else. It is safe to call on every start,
// also from several processes at once.
func (f *SQL) Migrate(ctx context.Context) error {
	if f == nil || ctx == nil {
		return invalid("Migrate on a nil fence or with a nil context")
	}
	_, createErr := f.db.ExecContext(ctx, f.stmt.create)
	// A concurrent CREATE TABLE IF NOT EXISTS can fail in PostgreSQL
	// (duplicate type name) after the other one made the table: what counts
	// is whether the table is there now.
	if _, err := f.db.ExecContext(ctx, f.stmt.probe); err != nil {
		return fmt.Errorf("fence: migrate %s table %s: %w", f.dialect, f.table, errors.Join(createErr, err))
	}
	return nil
}

// Check admits a write to resource by the holder of token, inside the
// caller's transaction tx: if the highest token accepted for resource is
// not higher than token, it raises it to token and returns nil; otherwise
// it returns a *StaleError (matching ErrStale) that names the resource,
// token and the newer token, and the caller must roll tx back. An equal
// token passes: the same hold may write several times.
//
// Call Check before the writes it protects, in the same transaction, and
// commit only after it returned nil. The resource's row stays locked until
// tx ends, so a concurrent Check of the same resource waits for tx: once tx
// commits, a lower token fails and a higher or equal one passes; once tx
// rolls back, it is as if this Check never ran. So no write with a lower
// token commits after one with a higher token. Check neither commits nor
// rolls back.
//
// This holds under each database's default isolation (READ COMMITTED in
// PostgreSQL, REPEATABLE READ in InnoDB, SQLite's serialized writers). Under
// PostgreSQL's REPEATABLE READ or SERIALIZABLE, a Check that waited for a
// concurrent one fails instead with the database's serialization error;
// retry the transaction. In SQLite, set busy_timeout, and begin write
// transactions with BEGIN IMMEDIATE or make Check their first statement
// (see the package documentation).
//
// resource is 1 to 255 characters of valid UTF-8 without NUL;
// token must be positive. Bad arguments give an error matching ErrInvalid.
func (f *SQL) Check(ctx context.Context, tx *sql.Tx, resource string, token int64) error {
	switch {
	case f == nil:
		return invalid("Check on a nil fence")
	case ctx == nil:
		return invalid("nil context")
	case tx == nil:
		return invalid("nil transaction: Check runs inside the transaction whose writes it fences")
	case token <= 0:
		return invalid("token %d for %q: tokens are positive", token, resource)
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	stored, err := f.raise(ctx, tx, resource, token)
	if err != nil {
		return fmt.Errorf("fence: check %q with token %d: %w", resource, token, err)
	}
	if stored > token {
		return &StaleError{Resource: resource, Token: token, Newer: stored}
	}
	return nil
}

// raise runs the dialect's conditional upsert and returns the resource's
// token after it: token when it was raised (or equal), the higher stored
// token when it was not.
func (f *SQL) raise(ctx context.Context, tx *sql.Tx, resource string, token int64) (int64, error) {
	var stored int64
	if f.stmt.returning {
		err := tx.QueryRowContext(ctx, f.stmt.check, f.stmt.checkArgs(resource, token)...).Scan(&stored)
		if !errors.Is(err, sql.ErrNoRows) {
			return stored, err
		}
		// No row: the stored token is higher. The row is locked by the
		// upsert, so this reads the token it lost to.
	} else if _, err := tx.ExecContext(ctx, f.stmt.check, f.stmt.checkArgs(resource, token)...); err != nil {
		return 0, err
	}
	err := tx.QueryRowContext(ctx, f.stmt.read, resource).Scan(&stored)
	return stored, err
}

func checkResource(resource string) error {
	switch {
	case resource == "":
		return invalid("empty resource")
	case !utf8.ValidString(resource):
		return invalid("resource %q is not valid UTF-8", resource)
	case strings.IndexByte(resource, 0) >= 0:
		return invalid("resource %q contains NUL", resource)
	case utf8.RuneCountInString(resource) > maxResource:
		return invalid("resource of %d characters: at most %d", utf8.RuneCountInString(resource), maxResource)
	}
	return nil
}
