package guard

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxIdentity is the longest identity a hold records, in bytes.
const maxIdentity = 128

// WithIdentity names the holder in every hold the Locker takes, so that an
// operator sees who holds a key (Inspect, guardctl): a host, a pod, a
// process. It is recorded with each fresh hold, in the same write that
// takes it, and dropped with the hold. Default: "hostname/pid". Must be
// non-empty, printable UTF-8 (spaces allowed, no control characters) and
// at most 128 bytes.
func WithIdentity(s string) Option {
	return func(c *config) { c.identity, c.identitySet = s, true }
}

// resolveIdentity fills in the default identity or checks the one given.
func (c *config) resolveIdentity() error {
	if !c.identitySet {
		c.identity = defaultIdentity()
		return nil
	}
	return checkIdentity(c.identity)
}

func checkIdentity(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty identity", ErrInvalid)
	case len(s) > maxIdentity:
		return fmt.Errorf("%w: identity of %d bytes; at most %d", ErrInvalid, len(s), maxIdentity)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: identity %q is not valid UTF-8", ErrInvalid, s)
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("%w: identity %q has a character that is not printable", ErrInvalid, s)
	}
	return nil
}

// defaultIdentity is "hostname/pid", made printable and cut to maxIdentity.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.ToValidUTF8(host, "?")
	host = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, host)
	pid := "/" + strconv.Itoa(os.Getpid())
	for len(host)+len(pid) > maxIdentity {
		_, size := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-size]
	}
	return host + pid
}
