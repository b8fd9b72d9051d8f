package quorumstore

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

func TestTallyMapsMixedAnswers(t *testing.T) {
	const n = 3
	errNet := errors.New("connection refused")
	errWrong := fmt.Errorf("%w: holds a string", store.ErrWrongType)
	type answer struct {
		res store.Outcome
		err error
	}
	ok, gone, other, down, wrong := answer{store.Applied, nil}, answer{store.Expired, nil}, answer{store.Taken, nil}, answer{0, errNet}, answer{0, errWrong}
	for _, tc := range []struct {
		name      string
		answers   []answer
		want      store.Outcome
		decided   bool
		hopeless  bool
		wrongType bool
	}{
		{"all applied", []answer{ok, ok, ok}, store.Applied, true, false, false},
		{"a majority applied, one taken", []answer{ok, other, ok}, store.Applied, true, false, false},
		{"a majority applied, one down", []answer{ok, down, ok}, store.Applied, true, false, false},
		{"one applied so far", []answer{ok}, 0, false, false, false},
		{"applied, expired: the third decides", []answer{ok, gone}, 0, false, false, false},
		{"applied, expired, down", []answer{ok, gone, down}, 0, false, true, false},
		{"applied, taken, expired", []answer{ok, other, gone}, store.Expired, true, false, false},
		{"expired on a majority", []answer{gone, gone, ok}, store.Expired, true, false, false},
		{"taken on a majority", []answer{other, other}, store.Taken, true, false, false},
		{"more taken than expired", []answer{other, gone, other}, store.Taken, true, false, false},
		{"as many taken as expired", []answer{other, gone}, store.Expired, true, false, false},
		{"a majority down", []answer{down, down}, 0, false, true, false},
		{"wrong type on one", []answer{wrong, ok, down}, 0, false, true, false},
		{"wrong type on a majority", []answer{wrong, wrong, ok}, 0, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl tally
			for _, a := range tc.answers {
				tl.add(a.res, a.err)
			}
			got, decided := tl.decided(2)
			if decided != tc.decided || (decided && got != tc.want) {
				t.Fatalf("decided = %v, %v; want %v, %v", got, decided, tc.want, tc.decided)
			}
			if h := tl.hopeless(2, n); h != tc.hopeless {
				t.Fatalf("hopeless = %v, want %v", h, tc.hopeless)
			}
			if !decided {
				err := tl.err("renew", 2, n)
				if errors.Is(err, store.ErrWrongType) != tc.wrongType {
					t.Fatalf("err = %v: matches ErrWrongType %v, want %v", err, !tc.wrongType, tc.wrongType)
				}
				var noReply *store.NoReplyError
				if errors.As(err, &noReply) {
					t.Fatalf("err = %v matches a noReplyError", err)
				}
			}
		})
	}
}

func TestAcquireVotes(t *testing.T) {
	errNet := &store.NoReplyError{Err: errors.New("i/o timeout")}
	granted := func(token int64) nodeReply[store.AcquireReply] {
		return nodeReply[store.AcquireReply]{v: store.AcquireReply{Acquired: true, Token: token}}
	}
	busy := func(d time.Duration) nodeReply[store.AcquireReply] {
		return nodeReply[store.AcquireReply]{v: store.AcquireReply{HeldFor: d}}
	}
	failed := nodeReply[store.AcquireReply]{err: errNet}
	for _, tc := range []struct {
		name      string
		masters   int
		replies   []nodeReply[store.AcquireReply]
		decidedAt int // replies read when add first reports a decision; 0: never
		won       bool
		token     int64
		agree     int
		heldFor   time.Duration // busy answer; -1: an error
	}{
		{"granted by all", 3, []nodeReply[store.AcquireReply]{granted(5), granted(7), granted(6)}, 2, true, 7, 1, 0},
		{"granted by a majority that agrees", 3, []nodeReply[store.AcquireReply]{granted(9), failed, granted(9)}, 3, true, 9, 2, 0},
		{"busy everywhere: the second shortest", 3, []nodeReply[store.AcquireReply]{busy(3 * time.Second), busy(time.Second), busy(2 * time.Second)}, 2, false, 0, 0, 2 * time.Second},
		{"split: the busy one decides", 3, []nodeReply[store.AcquireReply]{granted(1), busy(4 * time.Second), failed}, 3, false, 0, 0, 4 * time.Second},
		{"one granted, the rest down", 3, []nodeReply[store.AcquireReply]{granted(1), failed, failed}, 3, false, 0, 0, -1},
		{"5 masters, 2 granted, 2 busy, 1 down", 5, []nodeReply[store.AcquireReply]{granted(1), busy(time.Second), granted(2), failed, busy(2 * time.Second)}, 5, false, 0, 0, time.Second},
		{"5 masters, a majority down", 5, []nodeReply[store.AcquireReply]{busy(time.Second), failed, failed, failed, busy(time.Second)}, 5, false, 0, 0, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := acquireVotes{masters: tc.masters, quorum: tc.masters/2 + 1, granted: map[int]int64{}}
			decidedAt := 0
			for i, r := range tc.replies {
				r.node = i
				if v.add(r) && decidedAt == 0 {
					decidedAt = i + 1
				}
			}
			if decidedAt != tc.decidedAt {
				t.Fatalf("decided after %d replies, want %d", decidedAt, tc.decidedAt)
			}
			if won := len(v.granted) >= v.quorum; won != tc.won {
				t.Fatalf("won = %v, want %v", won, tc.won)
			}
			if tc.won {
				if token, agree := v.token(); token != tc.token || agree != tc.agree {
					t.Fatalf("token = %d agreed by %d; want %d by %d", token, agree, tc.token, tc.agree)
				}
				return
			}
			rep, err := v.notGranted(len(tc.replies), time.Second)
			switch {
			case tc.heldFor < 0 && err == nil:
				t.Fatalf("busy for %v, want an error", rep.HeldFor)
			case tc.heldFor >= 0 && (err != nil || rep.HeldFor != tc.heldFor):
				t.Fatalf("notGranted = %v, %v; want busy for %v", rep.HeldFor, err, tc.heldFor)
			}
			var noReply *store.NoReplyError
			if errors.As(err, &noReply) {
				t.Fatalf("err = %v matches a noReplyError: the Locker would drop again", err)
			}
		})
	}
}
