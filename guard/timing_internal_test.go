package guard

import (
	"container/heap"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// t0 is an arbitrary instant for schedule tests.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestTimingValidation(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name                          string
		ttl, interval, grace, timeout time.Duration
		want                          string // "" when valid
	}{
		{"defaults", 30 * s, 10 * s, 3 * s, 3 * s, ""},
		{"tight but fits", 10 * s, 5 * s, 2 * s, 2*s + 898*time.Millisecond, ""},
		{"one ms over", 10 * s, 5 * s, 2 * s, 2*s + 899*time.Millisecond, "exceed TTL"},
		{"no grace", 10 * s, 5 * s, 0, s, ""},
		{"zero TTL", 0, s, 0, s, "TTL 0s must be positive"},
		{"interval = TTL", s, s, 0, time.Millisecond, "less than the TTL"},
		{"zero interval", s, 0, 0, time.Millisecond, "renew interval 0s"},
		{"grace = TTL", s, 100 * time.Millisecond, s, time.Millisecond, "stop grace"},
		{"negative grace", s, 100 * time.Millisecond, -1, time.Millisecond, "stop grace"},
		{"zero timeout", s, 100 * time.Millisecond, 0, 0, "request timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newTiming(tc.ttl, tc.interval, tc.grace, tc.timeout)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("newTiming: %v, want valid", err)
			case tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("newTiming: err = %v, want ErrInvalid mentioning %q", err, tc.want)
			}
		})
	}
}

func TestScaledTimingKeepsRatios(t *testing.T) {
	c, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ttl  time.Duration
		want timing
		err  bool
	}{
		{30 * time.Second, timing{30 * time.Second, 10 * time.Second, 3 * time.Second, 3 * time.Second}, false},
		{3 * time.Second, timing{3 * time.Second, time.Second, 300 * time.Millisecond, 300 * time.Millisecond}, false},
		{time.Hour, timing{time.Hour, 20 * time.Minute, 6 * time.Minute, 6 * time.Minute}, false},
		// At 2ms the drift allowance (2.02ms) leaves no room for the schedule.
		{2 * time.Millisecond, timing{}, true},
	}
	for _, tc := range tests {
		got, err := c.scaled(tc.ttl)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("scaled(%v) = %+v, %v; want %+v, error %v", tc.ttl, got, err, tc.want, tc.err)
		}
	}
}

// The stop rule: a lease confirmed by a request sent at sent is safe until
// sent + TTL - drift, and its job is told to stop StopGrace before that.
func TestStopRule(t *testing.T) {
	tests := []struct {
		ttl, grace   time.Duration
		safe, stopAt time.Duration // after the request was sent
	}{
		{30 * time.Second, 3 * time.Second, 30*time.Second - 302*time.Millisecond, 27*time.Second - 302*time.Millisecond},
		{time.Second, 100 * time.Millisecond, 988 * time.Millisecond, 888 * time.Millisecond},
		{100 * time.Second, 0, 98998 * time.Millisecond, 98998 * time.Millisecond},
	}
	for _, tc := range tests {
		tm := timing{ttl: tc.ttl, interval: tc.ttl / 3, grace: tc.grace, timeout: tc.ttl / 10}
		end := tm.safeEnd(t0)
		if got := end.Sub(t0); got != tc.safe {
			t.Errorf("TTL %v: safe end after %v, want %v", tc.ttl, got, tc.safe)
		}
		if got := tm.stopAt(end).Sub(t0); got != tc.stopAt {
			t.Errorf("TTL %v, grace %v: stop after %v, want %v", tc.ttl, tc.grace, got, tc.stopAt)
		}
	}
}

// testHold is a hold of a 30s lease acquired at t0 + at, as the heartbeat sees it.
func testHold(name string, at time.Duration) *hold {
	tm := timing{ttl: 30 * time.Second, interval: 10 * time.Second, grace: 3 * time.Second, timeout: 3 * time.Second}
	sent := t0.Add(at)
	return &hold{key: name, timing: tm, index: -1, leaseEnd: tm.safeEnd(sent), nextRenew: sent.Add(tm.interval)}
}

func names(holds []*hold) string {
	var s []string
	for _, h := range holds {
		s = append(s, h.key)
	}
	return strings.Join(s, ",")
}

func TestQueueTake(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		holds     []*hold
		inFlight  string // a hold whose renewal is on the wire
		now       time.Duration
		lost, due string
		next      time.Duration // sleep after take
	}{
		{"nothing due", []*hold{testHold("a", 0)}, "", 5 * s, "", "", 5 * s},
		{"renewal window opens a tenth of an interval early",
			[]*hold{testHold("a", 0)}, "", 9 * s, "", "a", 27*s - 302*time.Millisecond - 9*s},
		{"holds within the window share a batch",
			[]*hold{testHold("a", 0), testHold("b", 500*time.Millisecond), testHold("c", 2*s)}, "", 9*s + 500*time.Millisecond, "", "a,b", 2*s + 500*time.Millisecond},
		{"in flight: the scheduler waits for the stop time",
			[]*hold{testHold("a", 0)}, "a", 10 * s, "", "", 27*s - 302*time.Millisecond - 10*s},
		{"stop time reached with the renewal still out",
			[]*hold{testHold("a", 0)}, "a", 27*s - 302*time.Millisecond, "a", "", time.Hour},
		{"lost and due in one pass",
			[]*hold{testHold("old", -20*s), testHold("a", 0)}, "old", 9 * s, "old", "a", 27*s - 302*time.Millisecond - 9*s},
		{"empty queue sleeps", nil, "", 0, "", "", time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var q holdQueue
			for _, h := range tc.holds {
				h.inFlight = h.key == tc.inFlight
				heap.Push(&q, h)
			}
			lost, due := q.take(t0.Add(tc.now))
			if names(lost) != tc.lost || names(due) != tc.due {
				t.Fatalf("take: lost [%s], due [%s]; want lost [%s], due [%s]", names(lost), names(due), tc.lost, tc.due)
			}
			for _, h := range due {
				if !h.inFlight || h.index < 0 {
					t.Errorf("due hold %s: in flight %v, index %d; want in flight and still queued", h.key, h.inFlight, h.index)
				}
			}
			for _, h := range lost {
				if h.index != -1 {
					t.Errorf("lost hold %s still queued at %d", h.key, h.index)
				}
			}
			if got := q.next(t0.Add(tc.now)); got != tc.next {
				t.Errorf("next = %v, want %v", got, tc.next)
			}
		})
	}
}

func TestSettle(t *testing.T) {
	sent, now := t0.Add(10*time.Second), t0.Add(10*time.Second+40*time.Millisecond)
	transport := errors.New("i/o timeout")
	tests := []struct {
		name         string
		reply        store.RenewReply
		lost         error // matched with errors.Is; nil: kept
		leaseEnd     time.Time
		nextRenew    time.Time
		renewalsDone int
	}{
		{"renewed", store.RenewReply{Outcome: store.Applied}, nil,
			sent.Add(30*time.Second - 302*time.Millisecond), sent.Add(10 * time.Second), 1},
		{"transport error retries soon", store.RenewReply{Err: transport}, nil,
			t0.Add(30*time.Second - 302*time.Millisecond), now.Add(time.Second), 0},
		{"expired", store.RenewReply{Outcome: store.Expired}, ErrLeaseLost,
			t0.Add(30*time.Second - 302*time.Millisecond), t0.Add(10 * time.Second), 0},
		{"taken", store.RenewReply{Outcome: store.Taken}, ErrLeaseLost,
			t0.Add(30*time.Second - 302*time.Millisecond), t0.Add(10 * time.Second), 0},
		{"wrong type loses at once", store.RenewReply{Err: fmt.Errorf("%w: lock", ErrWrongType)}, ErrWrongType,
			t0.Add(30*time.Second - 302*time.Millisecond), t0.Add(10 * time.Second), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := testHold("a", 0)
			h.inFlight = true
			lost := h.settle(tc.reply, sent, now)
			if (tc.lost == nil) != (lost == nil) || (tc.lost != nil && !(errors.Is(lost, tc.lost) && errors.Is(lost, ErrLeaseLost))) {
				t.Fatalf("settle: lost = %v, want %v", lost, tc.lost)
			}
			if h.inFlight {
				t.Error("still in flight after its answer")
			}
			if !h.leaseEnd.Equal(tc.leaseEnd) || !h.nextRenew.Equal(tc.nextRenew) || h.renewals != tc.renewalsDone {
				t.Errorf("leaseEnd %v, nextRenew %v, renewals %d; want %v, %v, %d",
					h.leaseEnd.Sub(t0), h.nextRenew.Sub(t0), h.renewals, tc.leaseEnd.Sub(t0), tc.nextRenew.Sub(t0), tc.renewalsDone)
			}
		})
	}
}

// A late answer to an old renewal never moves the safe end back.
func TestSettleKeepsLaterEnd(t *testing.T) {
	h := testHold("a", 20*time.Second)
	end := h.leaseEnd
	h.settle(store.RenewReply{Outcome: store.Applied}, t0.Add(10*time.Second), t0.Add(21*time.Second))
	if !h.leaseEnd.Equal(end) {
		t.Fatalf("leaseEnd moved from %v to %v by an older renewal", end.Sub(t0), h.leaseEnd.Sub(t0))
	}
}

// A renewal that failed is retried retryEvery after the failure, not at
// once: the early window that lets holds share a batch applies to their
// regular renewals only. Against a server that refuses connections at once,
// an early retry would loop without pause until the lease's stop time.
func TestFailedRenewalWaitsToRetry(t *testing.T) {
	h := testHold("a", 0)
	var q holdQueue
	heap.Push(&q, h)
	failedAt := t0.Add(10 * time.Second)
	if _, due := q.take(failedAt); len(due) != 1 {
		t.Fatal("renewal not due at its time")
	}
	h.settle(store.RenewReply{Err: errors.New("connection refused")}, failedAt, failedAt)
	heap.Fix(&q, h.index)
	retry := h.timing.retryEvery()
	for _, at := range []time.Duration{0, retry / 2, retry - time.Millisecond} {
		if _, due := q.take(failedAt.Add(at)); len(due) != 0 {
			t.Fatalf("retried %v after the failure, want %v", at, retry)
		}
	}
	if next := q.next(failedAt); next != retry {
		t.Errorf("scheduler sleeps %v after the failure, want %v", next, retry)
	}
	if _, due := q.take(failedAt.Add(retry)); len(due) != 1 {
		t.Fatalf("not retried %v after the failure", retry)
	}
}
