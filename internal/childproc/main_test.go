package childproc

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	Dispatch(testHelpers)
	goleak.VerifyTestMain(m)
}
