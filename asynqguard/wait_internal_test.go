package asynqguard

import (
	"testing"
	"time"
)

// The wait budget of a busy task, from its options and its deadline: under
// Limit with the Retry policy a tenth of the time left, at most 10s, unless
// WaitFor says otherwise; every budget ends half a second before the
// deadline.
func TestWaitBudget(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	limit := []Option{Limit(2), Pattern("report:export")}
	with := func(opts ...Option) []Option { return append(append([]Option(nil), limit...), opts...) }
	const none = time.Duration(-1) // no deadline
	for _, c := range []struct {
		name string
		opts []Option
		left time.Duration // to the deadline; none for no deadline
		want time.Duration
	}{
		{"no Limit, no deadline", nil, none, 0},
		{"no Limit, asynq's default timeout", nil, 30 * time.Minute, 0},
		{"Limit, no deadline", limit, none, limitWaitMax},
		{"Limit, asynq's default timeout", limit, 30 * time.Minute, limitWaitMax},
		{"Limit, Timeout(1m)", limit, time.Minute, 6 * time.Second},
		{"Limit, Timeout(30s)", limit, 30 * time.Second, 3 * time.Second},
		{"Limit, 2s left", limit, 2 * time.Second, 200 * time.Millisecond},
		{"Limit, 400ms left", limit, 400 * time.Millisecond, 0},
		{"Limit, deadline passed", limit, -time.Second, 0},
		{"Limit(1) with KeyFunc", []Option{Limit(1), KeyFunc(defaultKey)}, none, limitWaitMax},
		{"Limit, Retry given", with(Retry()), time.Minute, 6 * time.Second},
		{"Limit, WaitFor(0)", with(WaitFor(0)), none, 0},
		{"Limit, WaitFor(1m), 30s left", with(WaitFor(time.Minute)), 30 * time.Second, 30*time.Second - deadlineMargin},
		{"Limit, WaitFor(1s), 30s left", with(WaitFor(time.Second)), 30 * time.Second, time.Second},
		{"Limit, Skip", with(Skip()), none, 0},
		{"Limit, Revoke", with(Revoke()), none, 0},
		{"Limit, Archive", with(Archive()), none, 0},
		{"Limit, Skip then Retry", with(Skip(), Retry()), none, limitWaitMax},
		{"WaitFor(2s) without Limit, 1s left", []Option{WaitFor(2 * time.Second)}, time.Second, time.Second - deadlineMargin},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := newConfig(c.opts)
			if err != nil {
				t.Fatal(err)
			}
			dl, ok := now.Add(c.left), c.left != none
			if got := cfg.waitBudget(now, dl, ok); got != c.want {
				t.Errorf("waitBudget = %v, want %v", got, c.want)
			}
		})
	}
}
