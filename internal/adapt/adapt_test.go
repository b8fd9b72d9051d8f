package adapt

import (
	"errors"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBucket(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		d    time.Duration
		want time.Time
	}{
		{t0, time.Minute, t0},
		{t0.Add(59 * time.Second), time.Minute, t0},
		{t0.Add(61 * time.Second), time.Minute, t0.Add(time.Minute)},
		{t0.Add(1500 * time.Millisecond), 500 * time.Millisecond, t0.Add(1500 * time.Millisecond)},
		{t0.Add(1499 * time.Millisecond), 500 * time.Millisecond, t0.Add(time.Second)},
		{time.Unix(-1, 0).UTC(), 2 * time.Second, time.Unix(-2, 0).UTC()}, // before the epoch
	} {
		if got := Bucket(tc.at, tc.d); !got.Equal(tc.want) {
			t.Errorf("Bucket(%v, %v) = %v, want %v", tc.at, tc.d, got, tc.want)
		}
	}
}

func TestInvalid(t *testing.T) {
	cause := errors.New("must be positive")
	err := Invalid("cronguard", "TTL(0s)", cause)
	if !errors.Is(err, guard.ErrInvalid) || !errors.Is(err, cause) {
		t.Fatalf("%v matches ErrInvalid %v, its cause %v", err, errors.Is(err, guard.ErrInvalid), errors.Is(err, cause))
	}
	if got, want := err.Error(), "cronguard: invalid configuration: TTL(0s): must be positive"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got, want := Invalidf("httpguard", "MaxBody %d must be positive", 0).Error(), "httpguard: invalid configuration: MaxBody 0 must be positive"; got != want {
		t.Fatalf("Invalidf: %q, want %q", got, want)
	}
}
