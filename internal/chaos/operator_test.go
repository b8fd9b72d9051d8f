package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
		r.inject(s.Kind, 0, func() string {
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			st, err := insp.ForceRelease(ctx, r.lockKey(g))
			if err != nil {
				t.Fatalf("force-release %q: %v", r.lockKey(g), err)
			}
			ended := "nothing (free)"
			if len(st.Holders) > 0 {
				ended = fmt.Sprintf("%s token %d", st.Holders[0].Identity, st.Holders[0].Token)
			}
			return fmt.Sprintf("%s (ended: %s)", w.id, ended)
		}, nil)
	}
	return r.finish()
}
