package chaos_test

import (
	"testing"

	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	childproc.Dispatch(map[string]func(args []string) error{
		"worker": chaos.RunWorker,
	})
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
