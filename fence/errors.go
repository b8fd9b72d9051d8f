package fence

import (
	"errors"
	"fmt"
)

var (
	// ErrStale means the resource has already accepted a higher token than
	// the one offered: a newer holder of the lock has written, so this
	// writer's lease ended (it was paused, partitioned or too slow) and its
	// write must not land. Errors matching it are *StaleError values, which
	// name the resource and both tokens.
	ErrStale = errors.New("fence: stale token")

	// ErrInvalid reports a bad argument: a nil database, transaction,
	// client or context, an unknown dialect, a bad table name, an empty or
	// overlong resource or key, a token that is not positive, a negative TTL.
	ErrInvalid = errors.New("fence: invalid argument")
)

// StaleError is the error Check, Set, Del and Get return when the resource has
// accepted a higher token than Token. It matches ErrStale with errors.Is.
type StaleError struct {
	Resource string // the SQL resource name or the Redis key
	Token    int64  // the token that was refused
	Newer    int64  // the higher token the resource has accepted
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: it has accepted token %d", e.Token, e.Resource, e.Newer)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
