package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event kinds, in the order a worker's iteration records them.
const (
	EvStart        = "start"         // the worker started
	EvEnd          = "end"           // the worker stopped by itself
	EvAcquireError = "acquire_error" // an acquisition failed (Err)
	EvAcquired     = "acquired"      // a lease was taken (Lease, Token)
	EvCtxDone      = "ctx_done"      // the lease's context ended (Cause, Lost)
	EvReadSent     = "read_sent"     // the fenced read is about to be sent
	EvRead         = "read"          // fenced read accepted (Read)
	EvReadStale    = "read_stale"    // fenced read refused: a newer token was seen
	EvReadError    = "read_error"    // fenced read failed otherwise (Err)
	EvAbandon      = "abandon"       // the job saw its context done and did not write
	EvWrite        = "write"         // a write is attempted (Read, Value)
	EvWriteOK      = "write_ok"      // the write was accepted
	EvWriteStale   = "write_stale"   // the write was refused by fencing
	EvWriteError   = "write_error"   // the write's outcome is unknown (Err)
	EvRelease      = "release"       // the job returned; the release starts
	EvReleased     = "released"      // the release returned (Err)
)

// Event is one line of a worker's history. Times are those of the moment
// the worker recorded the event: Mono in nanoseconds since the worker
// started (monotonic), Wall in Unix nanoseconds (comparable across the
// workers of one machine).
type Event struct {
	Worker string `json:"w"`
	Seq    int    `json:"seq"`
	Mono   int64  `json:"mono"`
	Wall   int64  `json:"wall"`
	Kind   string `json:"ev"`
	// Lease numbers the worker's leases from 1; Token is the lease's
	// fencing token.
	Lease int   `json:"lease,omitempty"`
	Token int64 `json:"tok,omitempty"`
	// Read is the counter value the lease read; Value the value it writes.
	Read  *int64 `json:"read,omitempty"`
	Value *int64 `json:"val,omitempty"`
	// Canceled reports whether the job's context was done when the
	// write's outcome was known.
	Canceled bool `json:"canceled,omitempty"`
	// Cause is context.Cause of the lease's context; Lost reports
	// whether it matches guard.ErrLeaseLost.
	Cause string `json:"cause,omitempty"`
	Lost  bool   `json:"lost,omitempty"`
	Err   string `json:"err,omitempty"`
}

// Recorder appends Events to a history file, one JSON line each, written
// with a single write so that a killed worker leaves whole lines. It is
// safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	f      *os.File
	worker string
	start  time.Time
	seq    int
}

// NewRecorder creates (or appends to) the history file at path for worker.
func NewRecorder(path, worker string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, worker: worker, start: time.Now()}, nil
}

// Record stamps e with the worker, its sequence number and both times, and
// appends it.
func (r *Recorder) Record(e Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.seq++
	e.Worker, e.Seq = r.worker, r.seq
	e.Mono, e.Wall = int64(now.Sub(r.start)), now.UnixNano()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = r.f.Write(append(b, '\n'))
	return err
}

// Close closes the file.
func (r *Recorder) Close() error {
	return r.f.Close()
}

// ParseHistory parses a history: one Event per line, each naming the same
// worker, with sequence numbers 1, 2, 3... Any other line is an error
// naming its line number.
func ParseHistory(b []byte) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var e Event
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("line %d: %v: %q", n, err, sc.Text())
		}
		switch {
		case e.Worker == "" || e.Kind == "":
			return nil, fmt.Errorf("line %d: no worker or event kind: %q", n, sc.Text())
		case len(evs) > 0 && e.Worker != evs[0].Worker:
			return nil, fmt.Errorf("line %d: worker %q in the history of %q", n, e.Worker, evs[0].Worker)
		case e.Seq != n:
			return nil, fmt.Errorf("line %d: sequence number %d", n, e.Seq)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("empty history")
	}
	return evs, nil
}

// ReadHistory reads and parses the history file at path.
func ReadHistory(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	evs, err := ParseHistory(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return evs, nil
}

func i64(v int64) *int64 { return &v }
