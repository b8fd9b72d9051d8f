package chaos_test

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/redistest"
)

// An operator's force-release in the middle of a job (issue 28).
const (
	kindForceRelease = "guardctl release --force of the holder"
	whyForceRelease  = "a force-release wakes the waiters at once; the holder learns it only at its next renewal, up to TTL/3 later"
)

// runOperator: one server; at each fault the holder of the workers' key
// is found and its hold force-released as guardctl release --force does
// (Locker.ForceRelease, the call that command makes), while its job runs.
func runOperator(t *testing.T, p profile, seed uint64) []*chaos.Result {
	server := redistest.Start(t)
	r := newRun(t, p, "standalone-operator", chaos.Standalone)
	r.lockAddr = server.Addr()
	g := &group{name: "g", fencingOnly: map[string]string{kindForceRelease: whyForceRelease}}
	r.groups = []*group{g}
	r.startWorkers(g, p.workers)
	insp := inspector(t, server.Client(t, fastOptions))
	for _, s := range plan(p, seed, r.name, kindForceRelease) {
		if r.over() {
			break
		}
		time.Sleep(s.Gap)
		w := r.holder(g, insp)
		r.waitAcquiredRecorded(w, insp, r.lockKey(g))
		r.inject(s.Kind, 0, func() string {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			st, err := insp.ForceRelease(ctx, r.lockKey(g))
			if err != nil {
				t.Fatalf("force-release %q: %v", r.lockKey(g), err)
			}
			if len(st.Holders) == 0 {
				t.Logf("%s: force-released nothing: %s had already released", r.name, w.id)
				return "nothing (free)"
			}
			h := st.Holders[0]
			t.Logf("%s: force-released %s token %d", r.name, h.Identity, h.Token)
			// The worker whose hold it ended is the target, which
			// may not be w if w released meanwhile: a loss of
			// another worker's under this fault is not excused by it.
			return h.Identity
		}, nil)
	}
	return r.finish()
}

// waitAcquiredRecorded waits, up to 1s, until w's history records its
// acquisition of the hold it has on key: Inspect can see a hold before its
// worker writes it down, and a force-release in between would end, in the
// histories, before the lease it ended began, and be taken for a loss
// that no fault explains.
func (r *run) waitAcquiredRecorded(w *workerProc, insp *guard.Locker, key string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(r.t.Context(), time.Second)
	st, err := insp.Inspect(ctx, key)
	cancel()
	if err != nil || len(st.Holders) == 0 || st.Holders[0].Identity != w.id {
		return // it released already: the fault hits whoever holds it now
	}
	tok := st.Holders[0].Token
	for range 100 {
		b, err := os.ReadFile(w.history)
		if err == nil {
			if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
				b = b[:i+1] // the worker may be writing a line
			}
			evs, _ := chaos.ParseHistory(b)
			if slices.ContainsFunc(evs, func(e chaos.Event) bool { return e.Kind == chaos.EvAcquired && e.Token == tok }) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Logf("%s: %s did not record its acquisition (token %d) within 1s", r.name, w.id, tok)
}
