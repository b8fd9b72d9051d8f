package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// A registration is what an acquisition that waits adds to its lock's
// queue (a sorted set, by expiry), and what set_counts.lua reads to grant
// or name the next waiter. Its format lives here and in the scripts only.

// registration is what an acquisition that waits adds to the lock's queue
// (acquire.lua documents the format; the identity comes last, so its spaces
// are its own); "" for one that will not wait. A writer takes the key from
// a release (a grant) where the store grants (see New). The kind of a
// permit's registration carries its number of permits ("g4": one of 4).
func (s *Store) registration(a store.AcquireArgs) string {
	if a.Waiter == "" {
		return ""
	}
	kind := byte('r')
	switch {
	case a.Write && s.grants:
		kind = 'g'
	case a.Write:
		kind = 'w'
	}
	// Written into one buffer of the right size: one allocation for what
	// concatenations and formatted numbers would take three or four.
	var r strings.Builder
	var num [20]byte // an int64 in decimal
	r.Grow(len(a.Waiter) + len(a.Owner) + len(a.Identity) + 5*len(num))
	r.WriteString(a.Waiter)
	r.WriteByte(' ')
	r.WriteString(a.Owner)
	r.WriteByte(' ')
	r.WriteByte(kind)
	if a.Permits > 1 {
		r.Write(strconv.AppendInt(num[:0], int64(a.Permits), 10))
	}
	for _, d := range [...]time.Duration{a.TTL, a.MinHold, a.FenceTTL} {
		r.WriteByte(' ')
		r.Write(strconv.AppendInt(num[:0], ms(d), 10))
	}
	if a.Identity != "" {
		r.WriteByte(' ')
		r.WriteString(a.Identity) // last: it may hold spaces
	}
	return r.String()
}

// parseRegistration reads a registration in a lock's queue (see
// Store.registration): "<Locker id> <owner> <kind> <TTL ms> <MinHold
// ms> <FenceTTL ms>[ <identity>]", where the kind of a permit's writer
// carries its number of permits ("g4", "w4"). ok is false for one of
// another shape.
func parseRegistration(m string) (w store.Waiter, ok bool) {
	f := strings.SplitN(m, " ", 7)
	if len(f) < 6 || len(f[2]) < 1 || !strings.Contains("gwr", f[2][:1]) {
		return store.Waiter{}, false
	}
	if n := f[2][1:]; n != "" {
		if p, err := strconv.Atoi(n); err != nil || p < 2 || f[2][0] == 'r' {
			return store.Waiter{}, false
		}
	}
	w = store.Waiter{Locker: f[0], Owner: f[1], Write: f[2] != "r"}
	if len(f) == 7 {
		w.Identity = f[6]
	}
	return w, true
}
