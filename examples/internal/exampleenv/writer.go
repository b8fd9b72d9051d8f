package exampleenv

import (
	"strings"
	"sync"
)

// Writer is an io.Writer that is safe for concurrent use, so that a test can
// have a story and a span exporter write to one buffer and read it back with
// String. The zero value is an empty buffer, ready to use.
type Writer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p to the buffer. It never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// String returns everything written so far.
func (w *Writer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
