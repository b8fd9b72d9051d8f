package faultproxy

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
}
