package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jobguard/jobguard/guard/internal/store"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/prelude.lua
	preludeLua string
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/renew.lua
	renewLua string
	//go:embed scripts/set_counts.lua
	setCountsLua string
	//go:embed scripts/claim_fenced.lua
	claimFencedLua string
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/charge.lua
	chargeLua string
	//go:embed scripts/write_fence.lua
	writeFenceLua string
	//go:embed scripts/unclaim.lua
	unclaimLua string
	//go:embed scripts/acquire_claim.lua
	acquireClaimLua string
	//go:embed scripts/release_claim.lua
	releaseClaimLua string
)

// script is one of guard's Lua scripts. A server with FUNCTION (Redis 7
// and later) runs it as a function of the guard library, loaded once per
// server and kept by it across restarts and failovers; the prelude's
// helpers are then defined once, not on every call. Other servers (older
// Redis, the embedded miniredis) run it by hash.
type script struct {
	lua *redis.Script
	fn  string // the function's name in the library
	// fnArg, shaArg and srcArg are the function's name, lua's hash and
	// its source, boxed once for FCALL, EVALSHA and EVAL: hooks that read
	// a command's script (by name, say) see a string.
	fnArg, shaArg, srcArg any
}

// publishLine is the line of prelude.lua that newScripts rewrites for
// Cluster.
const publishLine = "local PUBLISH = 'PUBLISH'"

// scripts are compiled per store rather than as package variables, keeping
// the package free of global state; redis.NewScript only hashes the source.
type scripts struct {
	acquire, renew, setCounts script
	claimFenced               script
	inspect                   script // inspect.lua: Inspect and ForceRelease
	charge                    script
	writeFence                script // write_fence.lua: a quorum's token written back
	unclaim                   script // unclaim.lua: a quorum's claim taken back
	claims                    claimScripts
	// library is the FUNCTION LOAD source. Its name carries a hash of the
	// scripts, so Lockers of two versions of this package can share a
	// server during a rolling deploy, each calling its own.
	library     string
	noFunctions atomic.Bool // a server knows no FCALL or denies it: use EVALSHA
}

// newScripts compiles the scripts for a store; sharded ones notify waiters
// with SPUBLISH (Cluster), the others with PUBLISH.
func newScripts(sharded bool) *scripts {
	bodies := []struct {
		name string
		lua  string
	}{{"acquire", acquireLua}, {"renew", renewLua}, {"set_counts", setCountsLua}, {"claim_fenced", claimFencedLua}, {"inspect", inspectLua}, {"charge", chargeLua}, {"write_fence", writeFenceLua}, {"unclaim", unclaimLua}}
	bodies = append(bodies, claimBodies()...)
	h := sha1.New()
	for _, b := range bodies {
		h.Write([]byte(b.lua))
	}
	prelude := preludeLua
	if sharded {
		prelude = strings.Replace(prelude, publishLine, "local PUBLISH = 'SPUBLISH'", 1)
	}
	h.Write([]byte(prelude))
	name := "jobguard_" + hex.EncodeToString(h.Sum(nil))[:12]
	evalPrelude := prelude
	// A function library may not call Redis while it loads; functions are
	// replicated as effects anyway.
	prelude = strings.Replace(prelude, "if redis.replicate_commands then redis.replicate_commands() end", "", 1)
	var lib strings.Builder
	fmt.Fprintf(&lib, "#!lua name=%s\n%s\n", name, prelude)
	made := make([]script, len(bodies))
	for i, b := range bodies {
		fn := name + "_" + b.name
		fmt.Fprintf(&lib, "redis.register_function('%s', function(KEYS, ARGV)\n%s\nend)\n", fn, b.lua)
		src := evalPrelude + b.lua
		lua := redis.NewScript(src)
		made[i] = script{lua: lua, fn: fn, fnArg: fn, shaArg: lua.Hash(), srcArg: src}
	}
	return &scripts{acquire: made[0], renew: made[1], setCounts: made[2], claimFenced: made[3], inspect: made[4], charge: made[5], writeFence: made[6], unclaim: made[7], claims: claimScriptsOf(made[8:]), library: lib.String()}
}

// runFunction sends calls as FCALL of sc's function, setting each call's
// reply. A server without the
// library gets it (FUNCTION LOAD on the node that serves route) and the
// calls again. ok is false when the caller must send them by hash instead:
// the server knows no FCALL or its ACL denies it (from then on the store
// uses EVALSHA), or the library could not be had where the calls landed.
func (s *Store) runFunction(ctx context.Context, sc *script, route string, calls []scriptCall, ack bool) (unacked error, ok bool) {
	wait := ack && s.replicas > 0
	for attempt := 0; attempt < 2; attempt++ {
		var waited *redis.Cmd
		if len(calls) == 1 && !wait {
			calls[0].reply = calls[0].cmd(ctx, "fcall", sc.fnArg)
			s.send(ctx, calls[0].reply)
		} else {
			waited = s.pipeline(ctx, calls, wait, "fcall", sc.fnArg)
		}
		switch {
		case anyErr(calls, isUnknownCommand), anyErr(calls, isNoPermission):
			s.scripts.noFunctions.Store(true)
			return nil, false
		case !anyErr(calls, isNoFunction):
			if waited != nil {
				unacked = s.checkAck(waited)
			}
			return unacked, true
		case attempt == 0:
			if err := s.loadLibrary(ctx, route); err != nil {
				return nil, false
			}
		}
	}
	return nil, false
}

// loadLibrary loads the guard library on the master that serves route. A
// server that refuses FUNCTION LOAD for good (an ACL, a proxy that does not
// know it) is not asked again; one that fails it for now (LOADING, READONLY
// during a failover) is asked at the next call.
func (s *Store) loadLibrary(ctx context.Context, route string) error {
	var err error
	if s.cluster != nil {
		node, nerr := s.cluster.MasterForKey(ctx, route)
		if nerr != nil {
			return nerr
		}
		err = node.FunctionLoadReplace(ctx, s.scripts.library).Err()
	} else {
		err = s.client.FunctionLoadReplace(ctx, s.scripts.library).Err()
	}
	if err != nil && (isNoPermission(err) || isUnknownCommand(err)) {
		s.scripts.noFunctions.Store(true)
	}
	return err
}

// send sends one command, through the batcher outside Cluster (see
// batcher); its reply or error is the command's.
func (s *Store) send(ctx context.Context, cmd *redis.Cmd) {
	if s.batch != nil {
		s.batch.process(ctx, cmd)
		return
	}
	_ = s.client.Process(ctx, cmd)
}

// scriptCall is one call of a script: its command line, and once sent,
// its reply. The reply is kept in the call rather than returned in a slice
// of replies, so a caller that sends one call from a scriptCall on its
// stack allocates nothing for it.
type scriptCall struct {
	argv  *argv
	reply *redis.Cmd
}

// argv is the command line of one script call, built in one allocation:
// the command and the script, the number of KEYS, the KEYS and the ARGV.
// Boxing a string or an integer into the line, as FCall and EvalSha do
// every key and argument, costs an allocation each; a pointer boxes for
// free. So the strings and integers are copied into the argv's own arrays
// and put on the line as pointers to their copies (strArg, intArg), which
// go-redis writes through MarshalBinary without allocating, and which a
// hook that prints a command (Cmd.String, a tracing hook's statement)
// prints as their values, through String. The first key is boxed as it is:
// a Cluster client routes the command by it, which reads a string directly
// and anything else through fmt. Its arrays have room for every call of
// acquire.lua and set_counts.lua (the hot ones); past that room it boxes,
// which costs allocations but is just as right.
type argv struct {
	line []any // [command, script, len(KEYS), KEYS..., ARGV...]
	buf  [14]any
	strs [6]strArg
	ints [3]intArg
	ns   uint8
	ni   uint8
	keys uint8
}

// strArg is a string argument of an argv.
type strArg string

// MarshalBinary is the string's bytes, for go-redis's writer: a view, not
// a copy, which the writer only reads.
func (a *strArg) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(string(*a)), len(*a)), nil
}

// String is the string, for hooks that print the command.
func (a *strArg) String() string { return string(*a) }

// intArg is an integer argument of an argv, with room for its digits.
type intArg struct {
	n      int64
	digits [20]byte
}

// MarshalBinary is the integer in decimal, as go-redis writes an int64.
func (a *intArg) MarshalBinary() ([]byte, error) {
	return strconv.AppendInt(a.digits[:0], a.n, 10), nil
}

// String is the integer in decimal, for hooks that print the command.
func (a *intArg) String() string { return strconv.FormatInt(a.n, 10) }

// newArgv returns an empty command line; its KEYS come first (key), then
// its ARGV (str, int, ms, lit).
func newArgv() *argv {
	v := &argv{}
	v.line = v.buf[:3]
	return v
}

// key adds a key; every key comes before the first argument.
func (v *argv) key(k string) {
	if v.keys == 0 {
		v.line = append(v.line, k) // the route: see argv
	} else {
		v.str(k)
	}
	v.keys++
}

func (v *argv) str(s string) {
	if s == "" || int(v.ns) == len(v.strs) {
		v.line = append(v.line, s) // an empty string boxes for free
		return
	}
	v.strs[v.ns] = strArg(s)
	v.line = append(v.line, &v.strs[v.ns])
	v.ns++
}

func (v *argv) int(n int64) {
	// Boxing an integer below 256 allocates nothing (the runtime keeps
	// those boxed), so it takes no room.
	if n < 0 || n >= 256 {
		if int(v.ni) < len(v.ints) {
			v.ints[v.ni].n = n
			v.line = append(v.line, &v.ints[v.ni])
			v.ni++
			return
		}
	}
	v.line = append(v.line, n)
}

// ms adds d in whole milliseconds (see ms).
func (v *argv) ms(d time.Duration) { v.int(ms(d)) }

// lit adds a value as it is: a constant string, a []byte.
func (v *argv) lit(a any) { v.line = append(v.line, a) }

// call returns the call of the command line built so far.
func (v *argv) call() scriptCall { return scriptCall{argv: v} }

// cmd returns the call as command ("fcall", "evalsha", "eval": a constant,
// which boxes for free) of script (a script's fnArg, shaArg or srcArg),
// unsent. The commands made of one call share its line: each is sent and
// answered before the next is made.
func (c *scriptCall) cmd(ctx context.Context, command, script any) *redis.Cmd {
	line := c.argv.line
	line[0], line[1], line[2] = command, script, int(c.argv.keys)
	cmd := redis.NewCmd(ctx, line...)
	if c.argv.keys > 0 {
		// Where FCall and EvalSha would: a Cluster client routes the
		// command by its first key.
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// runOne sends call alone (see runScript) and returns its reply.
func (s *Store) runOne(ctx context.Context, sc *script, route string, call scriptCall, ack bool) (reply *redis.Cmd, unacked, err error) {
	calls := [1]scriptCall{call}
	unacked, err = s.runScript(ctx, sc, route, calls[:], ack)
	return calls[0].reply, unacked, err
}

// runScript sends calls of sc in one round trip, followed by WAIT when ack
// is set and the store waits for replicas: as FCALL of the guard library
// where the server has FUNCTION (see runFunction), else by hash. It sets
// each call's reply, and returns unacked, when too few replicas
// acknowledged, and err when the script could not be loaded (the replies
// are then not to be read: unset, or a failed attempt's).
func (s *Store) runScript(ctx context.Context, sc *script, route string, calls []scriptCall, ack bool) (unacked, err error) {
	if !s.scripts.noFunctions.Load() {
		if unacked, ok := s.runFunction(ctx, sc, route, calls, ack); ok {
			return unacked, nil
		}
	}
	return s.runEval(ctx, sc, route, calls, ack)
}

// runEval sends calls by hash (EVALSHA). A server whose script cache lacks
// sc (after a restart, a failover, on a new Cluster node) gets the source
// instead: one call is sent again as EVAL, which follows a Cluster
// redirection as EVALSHA does; a pipeline first has sc loaded on the node
// that serves route and is sent again, then as EVAL if that node was not the
// one that answered.
func (s *Store) runEval(ctx context.Context, sc *script, route string, calls []scriptCall, ack bool) (unacked, err error) {
	wait := ack && s.replicas > 0
	if len(calls) == 1 && !wait {
		// One command needs no pipeline, and costs less without one.
		c := &calls[0]
		c.reply = c.cmd(ctx, "evalsha", sc.shaArg)
		s.send(ctx, c.reply)
		if err := c.reply.Err(); err != nil && isNoScript(err) {
			c.reply = c.cmd(ctx, "eval", sc.srcArg)
			s.send(ctx, c.reply)
		}
		return nil, nil
	}
	waited := s.pipeline(ctx, calls, wait, "evalsha", sc.shaArg)
	if anyErr(calls, isNoScript) {
		if err := sc.lua.Load(ctx, s.scripter(ctx, route)).Err(); err != nil {
			return nil, err
		}
		if waited = s.pipeline(ctx, calls, wait, "evalsha", sc.shaArg); anyErr(calls, isNoScript) {
			waited = s.pipeline(ctx, calls, wait, "eval", sc.srcArg)
		}
	}
	if waited != nil {
		unacked = s.checkAck(waited)
	}
	return unacked, nil
}

// pipeline sends calls as command of script (see scriptCall.cmd), setting
// each call's reply; and WAIT after them when wait is set.
func (s *Store) pipeline(ctx context.Context, calls []scriptCall, wait bool, command, script any) (waited *redis.Cmd) {
	pipe := s.client.Pipeline()
	for i := range calls {
		c := &calls[i]
		c.reply = c.cmd(ctx, command, script)
		_ = pipe.Process(ctx, c.reply)
	}
	if wait {
		waited = pipe.Do(ctx, "WAIT", s.replicas, ms(s.replicaTimeout))
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	return waited
}

// checkAck reads WAIT's answer: nil when enough replicas acknowledged.
func (s *Store) checkAck(waited *redis.Cmd) error {
	n, err := waited.Int64()
	if err == nil && n >= int64(s.replicas) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %d of %d replicas within %v: %w", store.ErrNotReplicated, n, s.replicas, s.replicaTimeout, err)
	}
	return fmt.Errorf("%w: %d of %d replicas within %v", store.ErrNotReplicated, n, s.replicas, s.replicaTimeout)
}

// scripter returns where to load a script for the node that serves route:
// on Cluster that node's master alone, since ClusterClient.ScriptLoad waits
// for every master and a hung one would fail the healthy ones' requests.
func (s *Store) scripter(ctx context.Context, route string) redis.Scripter {
	if s.cluster != nil {
		if node, err := s.cluster.MasterForKey(ctx, route); err == nil {
			return node
		}
	}
	return s.client
}

func anyErr(calls []scriptCall, is func(error) bool) bool {
	for _, c := range calls {
		if err := c.reply.Err(); err != nil && is(err) {
			return true
		}
	}
	return false
}

func isNoScript(err error) bool { return strings.HasPrefix(err.Error(), "NOSCRIPT") }

// isNoFunction reports the answer of a server that has FUNCTION but not
// the library (a new node, a FUNCTION FLUSH).
func isNoFunction(err error) bool {
	_, reply := errors.AsType[redis.Error](err)
	return reply && strings.Contains(err.Error(), "Function not found")
}

// isNoPermission reports a command the server's ACL denies the client:
// one that may run scripts by hash but not functions keeps working.
func isNoPermission(err error) bool {
	_, reply := errors.AsType[redis.Error](err)
	return reply && strings.HasPrefix(err.Error(), "NOPERM")
}

// isUnknownCommand reports the answer of a server without FCALL.
func isUnknownCommand(err error) bool {
	_, reply := errors.AsType[redis.Error](err)
	return reply && strings.Contains(strings.ToLower(err.Error()), "unknown command")
}
