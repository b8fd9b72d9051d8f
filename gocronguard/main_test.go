package gocronguard_test

import (
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

// gocron's schedulers are shut down by every test that starts one, so
// goleak sees no goroutine of theirs either.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
