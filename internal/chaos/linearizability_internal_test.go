package chaos

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// An operation whose outcome is unknown ends at the return of the first
// operation accepted with a higher token, and nothing else ends it early.
func TestBoundUnknown(t *testing.T) {
	op := func(kind opKind, tok int64, outcome string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Call: call, Return: ret, Input: fencedInput{kind: kind, token: tok}, Output: fencedOutput{outcome: outcome}}
	}
	const open = int64(1) << 62
	ops := []porcupine.Operation{
		op(opWrite, 100, outUnknown, 10, open), // ends at 51: token 102's read
		op(opRead, 101, outUnknown, 20, open),  // ends at 51 too
		op(opWrite, 102, outUnknown, 30, open), // no higher token accepted: open
		op(opWrite, 101, outStale, 40, 41),     // refused: ends nothing
		op(opWrite, 100, outOK, 42, 43),        // equal token: ends nothing
		op(opRead, 102, outOK, 50, 51),
		op(opWrite, 103, outStale, 60, 61),     // refused
		op(opWrite, 101, outUnknown, 70, open), // called after 102 was accepted: a point
		op(opPeek, 0, outUnknown, 80, open),    // unfenced: not bounded
	}
	boundUnknown(ops)
	for i, want := range []int64{51, 51, open, 41, 43, 51, 61, 70, open} {
		if ops[i].Return != want {
			t.Errorf("op %d (%+v): returns at %d, want %d", i, ops[i].Input, ops[i].Return, want)
		}
	}
}
