package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/redistest"
)

// A key held as permits (guard.Permits) shows its number of permits and
// each permit holder as a write holder; --json adds "permits", which a
// plain lock's object leaves out.
func TestShowPermits(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	a := newLocker(t, client, guard.WithIdentity("limit-a/1"), guard.WithTTL(20*time.Second))
	b := newLocker(t, client, guard.WithIdentity("limit-b/2"), guard.WithTTL(20*time.Second))
	three := guard.Permits(3)
	acquire(t, t.Context(), a, "partner-api", three)
	acquire(t, t.Context(), b, "partner-api", three)
	url := "--url=redis://" + srv.Addr()

	r := must(t, 0, nil, url, "show", "partner-api")
	for _, want := range []string{"permits          3 (up to 3 write holders at once)", "holders: 2", "limit-a/1", "limit-b/2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = must(t, 0, nil, url, "--json", "show", "partner-api")
	var st lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Permits != 3 || len(st.Holders) != 2 || st.Holders[0].Mode != "write" || st.Holders[1].Mode != "write" ||
		st.Holders[0].Writes != 1 || st.Holders[1].Identity != "limit-b/2" {
		t.Errorf("show --json: %+v", st)
	}
	if !strings.Contains(r.stdout, `"permits":3`) {
		t.Errorf("show --json lacks permits: %s", r.stdout)
	}
}
