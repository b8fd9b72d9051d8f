package main

import (
	"fmt"
	"strings"
)

// lockKey returns the name of the lock that arg, the KEY of show, watch or
// release, names. A lock's name never holds '}', so an arg without one is
// the name itself. An arg with one may be a Redis key of the lock pasted
// from redis-cli ("guard:{report}", "guard:{report}:fence"): then a note on
// standard error says so and lockKey returns the name in it. Otherwise it
// reports a usage error that says what to pass, and ok is false.
func (c *cli) lockKey(arg string) (name string, code int, ok bool) {
	if !strings.Contains(arg, "}") {
		return arg, 0, true
	}
	name, what, err := nameInKey(c.opts.prefix, arg)
	if err != nil {
		return "", c.usageError("%v", err), false
	}
	c.note("%q is %s of lock %q; using the lock name", arg, what, name)
	return name, 0, true
}

// nameInKey returns the name of the lock whose Redis key under prefix is
// key, and what that key is to the lock ("the Redis key", "the fencing
// counter"). A lock's keys are "<prefix>{<name>}" and that followed by a
// suffix (see guard/internal/store.KeysFor): the braces are the Cluster
// hash tag that keeps them in one slot. The error says why key is none of
// them and what to pass instead; it shows key as shownArg does, and
// nothing of it when it looks like a URL ("://" or '@' in it, which a
// lock's name may also hold: its Redis key is read all the same).
func nameInKey(prefix, key string) (name, what string, err error) {
	shown := shownArg(key)
	generic := fmt.Errorf("%s is not a lock name: a name has no '}'; pass the lock's name, or its Redis key as redis-cli shows it (%sNAME})", shown, prefix+"{")
	if rest, ok := strings.CutPrefix(key, prefix+"{"); ok {
		name, suffix, _ := strings.Cut(rest, "}")
		what, ofLock := keyPart(suffix)
		switch {
		case name != "" && ofLock:
			return name, what, nil
		case !strings.HasPrefix(shown, `"`): // a URL: quote nothing of it
			return "", "", generic
		case name == "":
			return "", "", fmt.Errorf("%s is not a lock name (a name has no '}') nor a lock's Redis key: nothing is between the braces", shown)
		case what == "":
			return "", "", fmt.Errorf("%s is not a lock name (a name has no '}') nor a Redis key of lock %q (%s, or that followed by :fence, :waiters or :released); pass the name %q", shown, name, prefix+"{"+name+"}", name)
		}
		return "", "", fmt.Errorf("%s is %s of %q, not a lock; guardctl shows locks only: for the lock of the same name, pass %q", shown, what, name, name)
	}
	if !strings.HasPrefix(shown, `"`) { // a URL: quote nothing of it
		return "", "", generic
	}
	// A key under another prefix: "team:{report}" with --prefix "guard:".
	if open := strings.IndexByte(key, '{'); open >= 0 && !strings.Contains(key[:open], "}") {
		other := key[:open]
		name, suffix, _ := strings.Cut(key[open+1:], "}")
		if _, ofLock := keyPart(suffix); name != "" && ofLock {
			return "", "", fmt.Errorf("%s is not a lock name (a name has no '}'); it is a Redis key of lock %q under the prefix %q, not under --prefix %q: pass --prefix %q and the name %q", shown, name, other, prefix, other, name)
		}
	}
	return "", "", generic
}

// keyPart returns what the Redis key "<prefix>{<name>}"+suffix is, and
// whether it is one of the lock's own keys (its hash, fencing counter,
// queue of waiters, release channel, release markers) rather than a claim
// or a budget that only shares the name's slot. what is "" for a suffix
// that guard never writes.
func keyPart(suffix string) (what string, ofLock bool) {
	switch suffix {
	case "":
		return "the Redis key", true
	case ":fence":
		return "the fencing counter", true
	case ":waiters":
		return "the queue of waiting acquisitions", true
	case ":released":
		return "the release channel", true
	case ":claim":
		return "the claim (guard.Claim)", false
	case ":budget":
		return "the budget (guard.Charge)", false
	}
	if owner, ok := strings.CutPrefix(suffix, ":done:"); ok && owner != "" {
		return "a release marker", true
	}
	return "", false
}
