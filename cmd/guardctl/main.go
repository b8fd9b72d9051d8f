// Command guardctl shows who holds the locks that
// github.com/jobguard/jobguard/guard keeps in Redis, how long each hold has
// left, who waits for it, and releases a lock when an operator must.
//
//	go install github.com/jobguard/jobguard/cmd/guardctl@latest
//
// Usage:
//
//	guardctl [flags] ls [PATTERN]       list the locks whose key matches PATTERN (a Redis glob; default *)
//	guardctl [flags] show KEY           show a lock's holders, waiters and fencing counter
//	guardctl [flags] watch KEY          show KEY again whenever it changes, until interrupted
//	guardctl [flags] release KEY --force
//	                                    end every hold on KEY and wake its waiters
//
// KEY is the lock's key as the program passes it to guard (WithLock,
// Acquire), not the Redis key: with the default prefix, KEY "report" is the
// Redis hash "guard:{report}". A Redis key of the lock, pasted as redis-cli
// shows it, is taken too: "guard:{report}", and the other names guard gives
// the lock ("guard:{report}:fence", ":waiters", ":released", ":done:OWNER"),
// are read as KEY "report", with a note on standard error that says so. A key
// under another prefix than --prefix, or a claim's or a budget's key, is
// refused with what to pass instead. Flags may come before or after the
// command:
//
//	--url URL         the Redis deployment (default $REDIS_URL, else redis://localhost:6379)
//	--prefix P        the prefix the Lockers use (guard.WithPrefix; default "guard:")
//	--json            print JSON instead of a table (ls, show, watch, release)
//	--timeout D       bound on each request to Redis (default 5s)
//	--interval D      watch: how often to read the lock (default 1s, 100ms to 1m)
//	--force           release: required; without it release refuses
//	--cacert FILE     trust the CA certificates in FILE (PEM) for a TLS URL
//
// # Connecting
//
// URL names one server, a Sentinel group or a Cluster:
//
//	redis://[user:password@]host:port[/db][?option=value...]     one server (rediss:// for TLS, unix:///path.sock)
//	redis-sentinel://[user:password@]host:port[,host:port...]/MASTER[/db][?...]
//	redis-cluster://[user:password@]host:port[,host:port...][?...]
//
// rediss-sentinel:// and rediss-cluster:// use TLS, trusting the system's
// certificate authorities, or those in --cacert (rediss:// and
// rediss-sentinel:// also take skip_verify=true, which turns verification
// off). user and password
// authenticate to the Redis servers that hold the locks; a Sentinel's own
// credentials go in the options sentinel_username and sentinel_password. A
// Sentinel host without a port has 26379. Options are go-redis's URL options
// (dial_timeout, pool_size, skip_verify, ...: see redis.ParseURL).
//
// guardctl never prints a password. A message shows the URL only rebuilt,
// with the password, and the value of every option other than go-redis's
// settings that hold no secret (sentinel_password, password and a mistyped
// option name alike), replaced by xxxxx. A URL that it cannot read (no
// "scheme://", a character that must be percent-encoded, an '@' after the
// host) is refused and not shown at all: the message says what is wrong
// with it. Percent-encode '/', '?', '#' and '@' in a password (%2F, %3F,
// %23, %40).
//
// # Output
//
// ls prints one line per lock: KEY, MODE (write, read, or minhold for a
// hold released but kept until its MinHold ends), HOLDERS (the identity of
// the oldest holder and how many more), LEFT (until the last holder's hold
// expires unless renewed, on the server's clock), TOKEN (the newest holder's
// fencing token) and WAITERS (how many acquisitions wait). show prints
// every holder (identity, mode, lease counts, time left, fencing token,
// time until its MinHold ends, owner id), every waiting acquisition
// (identity, mode, time until its registration expires, Locker id, owner
// id) and the fencing counter. watch prints show's output again when the
// lock changes: on a terminal it redraws the screen at every read, else it
// prints a new snapshot only when holders, counts, tokens, waiters or the
// counter changed. release prints the holds it ended, under the heading
// "ended N holds of KEY", in show's table of holders (LEFT is what each had
// left), and then, under "now:", the lock as a read right after the
// release finds it, as show prints it (a waiter that the release woke may
// hold it already), or "now: free (fencing counter N)". Characters that
// are not printable in a key, an
// identity or an id (ESC, other control characters, invalid UTF-8) are
// shown escaped as Go writes them in a string (\x1b, \u009b, \xff), so
// that no name read from Redis can drive the terminal.
//
// With --json, show and release print one lock object (release: the lock
// as it ended it), ls an array of them, and watch one object per line per
// change. The field names are stable:
//
//	{
//	  "key": "report",               the lock's key
//	  "fence": 1761234567890123,     the fencing counter: the last token minted (0: none)
//	  "permits": 4,                  only for a key held as permits (guard.Permits): up to that many write holders
//	  "holders": [{
//	    "identity": "web-1/4242",    guard.WithIdentity of the holder ("" if not recorded)
//	    "owner": "Q2M...",           the hold's owner id
//	    "mode": "write",             "write" or "read"
//	    "writes": 1, "reads": 0,     1 in the hold's mode: its re-entries are counted in its process, not in Redis
//	    "left_ms": 29812,            until the hold expires unless renewed (-1: never)
//	    "token": 1761234567890123,   its fencing token
//	    "min_hold_ms": 0,            until its MinHold ends (0: none or passed)
//	    "lingering": false           released, kept only until its MinHold ends
//	  }],
//	  "waiters": [{
//	    "identity": "web-2/99", "owner": "...",
//	    "locker": "...",             the waiting Locker's id
//	    "mode": "write",
//	    "left_ms": 59931             until the registration expires unless the waiter tries again
//	  }]
//	}
//
// holders and waiters are always arrays, empty for a free lock; permits is
// left out for a plain lock. Strings are JSON strings: ESC is \u001b, and
// DEL, C1 controls and format characters are escaped (\u007f) too.
//
// # Eviction warning
//
// After a command that Redis answered, guardctl reads INFO memory from the
// server (each master of a Cluster) and, where a maxmemory is set with a
// maxmemory-policy other than noeviction, writes one line to standard
// error: "guardctl: warning: Redis at ... may evict lock keys under memory
// pressure", naming the policy and what it evicts (allkeys-*: any key, the
// fencing counter too; volatile-*: the keys with a TTL, which every lock
// has). A lock evicted while held lets a second owner in while its holder
// runs. A server that does not answer INFO is passed over in silence.
//
// # Exit status
//
// 0 when the lock (or, for ls, at least one lock) was found, or was
// released; 1 when it was not found (the key is free, or holds another Redis
// type), or a release was refused; 2 for a usage error or when Redis could
// not be reached or answered an error. Errors go to standard error, one
// line each, saying what to do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// Exit statuses.
const (
	exitFound    = 0
	exitNotFound = 1 // not found, or refused
	exitUsage    = 2 // a usage error, or Redis could not be reached or failed
)

const usage = `usage: guardctl [flags] COMMAND [ARGS]

commands:
  ls [PATTERN]            list the locks whose key matches PATTERN (a Redis glob; default *)
  show KEY                show a lock's holders, waiters and fencing counter
  watch KEY               show KEY again whenever it changes, until interrupted
  release KEY --force     end every hold on KEY and wake its waiters

KEY is the lock's name as the program passes it to guard; its Redis key as
redis-cli shows it (guard:{KEY}) is read as that name.

flags (before or after the command):
  --url URL         redis://host:port[/db], rediss://..., unix:///path,
                    redis-sentinel://host:port[,host:port...]/MASTER,
                    redis-cluster://host:port[,host:port...]
                    (default $REDIS_URL, else redis://localhost:6379)
  --prefix P        the prefix the Lockers use (default "guard:")
  --json            print JSON (ls, show, watch, release)
  --timeout D       bound on each request to Redis (default 5s)
  --interval D      watch: how often to read the lock (default 1s)
  --force           release: required
  --cacert FILE     trust the CA certificates in FILE (PEM) for a TLS URL

exit status: 0 found or released, 1 not found or refused, 2 usage or connection error
`

// options are the flags of every command.
type options struct {
	url      string
	prefix   string
	json     bool
	timeout  time.Duration
	interval time.Duration
	force    bool
	cacert   string
}

// flags defines the flags on fs with the values already in o as defaults,
// so that flags given before the command carry over to its own flag set.
func (o *options) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", o.url, "Redis URL")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "key prefix")
	fs.BoolVar(&o.json, "json", o.json, "print JSON")
	fs.DurationVar(&o.timeout, "timeout", o.timeout, "bound on each request")
	fs.DurationVar(&o.interval, "interval", o.interval, "watch: how often to read")
	fs.BoolVar(&o.force, "force", o.force, "release: required")
	fs.StringVar(&o.cacert, "cacert", o.cacert, "CA certificates (PEM) for a TLS URL")
}

func main() {
	// go-redis logs failed dials itself; the error that ends the run says it once.
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// cli is one run of the command.
type cli struct {
	opts   options
	stdout io.Writer
	stderr io.Writer
	locker *guard.Locker
	client redis.UniversalClient // the Locker's, for the eviction check
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	c := &cli{stdout: stdout, stderr: stderr}
	c.opts = options{url: getenv("REDIS_URL"), prefix: "guard:", timeout: 5 * time.Second, interval: time.Second}
	if c.opts.url == "" {
		c.opts.url = "redis://localhost:6379"
	}
	top := flag.NewFlagSet("guardctl", flag.ContinueOnError)
	c.opts.flags(top)
	rest, code, ok := c.parse(top, args)
	if !ok {
		return code
	}
	if len(rest) == 0 {
		return c.usageError("no command given")
	}
	cmd := rest[0]
	fs := flag.NewFlagSet("guardctl "+cmd, flag.ContinueOnError)
	c.opts.flags(fs)
	pos, code, ok := c.parse(fs, rest[1:])
	if !ok {
		return code
	}
	switch cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return exitFound
	case "ls", "list":
		if len(pos) > 1 {
			return c.usageError("ls takes at most one pattern, got %d arguments", len(pos))
		}
	case "show", "watch", "release":
		if len(pos) != 1 {
			return c.usageError("%s takes one lock key, got %d arguments", cmd, len(pos))
		}
	default:
		return c.usageError("unknown command %s", shownArg(cmd))
	}
	if code, ok := c.check(); !ok {
		return code
	}
	if cmd == "show" || cmd == "watch" || cmd == "release" {
		name, code, ok := c.lockKey(pos[0])
		if !ok {
			return code
		}
		pos[0] = name
	}
	if cmd == "release" && !c.opts.force {
		c.fail("refusing to release %q without --force: it ends every hold on the lock, and a holder learns it only at its next renewal; look first with 'guardctl show %s', then add --force", pos[0], pos[0])
		return exitNotFound
	}
	closeLocker, code, ok := c.connect()
	if !ok {
		return code
	}
	defer closeLocker()
	code = c.command(ctx, cmd, pos)
	if code != exitUsage { // Redis answered: is it one that may evict the locks?
		c.warnEviction(context.WithoutCancel(ctx), c.client)
	}
	return code
}

// command runs cmd on the connected Locker and returns the exit status.
func (c *cli) command(ctx context.Context, cmd string, pos []string) int {
	switch cmd {
	case "ls", "list":
		pattern := "*"
		if len(pos) == 1 {
			pattern = pos[0]
		}
		return c.list(ctx, pattern)
	case "show":
		return c.show(ctx, pos[0])
	case "watch":
		return c.watch(ctx, pos[0])
	default:
		return c.release(ctx, pos[0])
	}
}

// parse parses args with fs, flags and positional arguments in any order
// ("--" ends the flags). ok is false when the run is over, with code.
func (c *cli) parse(fs *flag.FlagSet, args []string) (pos []string, code int, ok bool) {
	fs.SetOutput(io.Discard)
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, usage)
			return nil, exitFound, false
		}
		if err != nil {
			return nil, c.usageError("%v", err), false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, 0, true
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), 0, true
		}
		if fs.Name() == "guardctl" {
			// Before the command: the command and what follows are its own.
			return rest, 0, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// check validates the flags' values.
func (c *cli) check() (int, bool) {
	o := c.opts
	switch {
	case o.timeout <= 0 || o.timeout > 10*time.Minute:
		return c.usageError("--timeout %v must be above 0 and at most 10m", o.timeout), false
	case o.interval < 100*time.Millisecond || o.interval > time.Minute:
		return c.usageError("--interval %v must be between 100ms and 1m", o.interval), false
	case strings.ContainsAny(o.prefix, "{}"):
		return c.usageError("--prefix %q must not contain '{' or '}'", o.prefix), false
	}
	return 0, true
}

// connect opens the client and a Locker on it, for the calls that read and
// release locks. The Locker never acquires: its TTL only leaves room for a
// request timeout of --timeout.
func (c *cli) connect() (closeAll func(), code int, ok bool) {
	client, err := dial(c.opts.url, c.opts.timeout, c.opts.cacert)
	if err != nil {
		c.fail("%v; see 'guardctl help' for the forms --url and REDIS_URL take", err)
		return nil, exitUsage, false
	}
	l, err := guard.New(client, guard.WithPrefix(c.opts.prefix), guard.WithTTL(time.Hour),
		guard.WithRequestTimeout(c.opts.timeout), guard.WithIdentity("guardctl"))
	if err != nil {
		_ = client.Close()
		c.fail("%v", err)
		return nil, exitUsage, false
	}
	c.locker, c.client = l, client
	return func() {
		_ = l.Close()
		_ = client.Close()
	}, 0, true
}

// usageError reports a usage error and returns its exit status.
func (c *cli) usageError(format string, args ...any) int {
	c.fail(format+"; run 'guardctl help' for usage", args...)
	return exitUsage
}

// fail writes one line to standard error, with what is not printable in
// it escaped: it may quote Redis's own errors.
func (c *cli) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", " ")), " ")
	fmt.Fprintln(c.stderr, "guardctl: "+printable(msg))
}

// note writes one line to standard error, as fail does, about what the
// command did in place of what it was given; the run goes on.
func (c *cli) note(format string, args ...any) { c.fail(format, args...) }

// failed reports an error of a request about what, and returns its exit
// status: not found for a key of another type, else a connection error.
func (c *cli) failed(what string, err error) int {
	if errors.Is(err, guard.ErrInvalid) {
		return c.usageError("%v", err)
	}
	if errors.Is(err, guard.ErrWrongType) {
		c.fail("%s is not a lock (%v); check the key and --prefix %q", what, err, c.opts.prefix)
		return exitNotFound
	}
	hint := "check --url or REDIS_URL, and that the server is reachable"
	if strings.Contains(c.opts.url, "-sentinel://") {
		hint = "check --url or REDIS_URL (the Sentinels' addresses and the master's name), and that the servers are reachable"
	}
	at := "the URL given" // dial read it, so maskURL does: not reached
	if shown, err := maskURL(c.opts.url); err == nil {
		at = shown
	}
	if errors.Is(err, context.DeadlineExceeded) {
		c.fail("no answer from Redis at %s about %s within --timeout %v; %s", at, what, c.opts.timeout, hint)
		return exitUsage
	}
	c.fail("Redis at %s failed on %s: %s; %s", at, what, scrub(err.Error(), c.opts.url), hint)
	return exitUsage
}

// shownArg is a command-line argument as a message may show it: quoted, or,
// when it looks like a URL typed in the wrong place, masked (see maskURL),
// so that a password in it is never echoed.
func shownArg(arg string) string {
	if !strings.Contains(arg, "://") && !strings.Contains(arg, "@") {
		return strconv.Quote(arg)
	}
	if masked, err := maskURL(arg); err == nil {
		return masked + " (a URL: pass it with --url)"
	}
	return "(an argument that looks like a URL; not shown)"
}
