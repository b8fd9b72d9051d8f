package guard_test

import (
	"testing"

	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	childproc.Dispatch(childHelpers)
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
