package exampleenv

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Printer writes an example's story, one line per event, stamped with the
// time since it was made: "[1.23s] who: what". It is safe for concurrent use.
type Printer struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

// NewPrinter returns a Printer writing to w, its clock starting now.
func NewPrinter(w io.Writer) *Printer { return &Printer{w: w, start: time.Now()} }

// Say writes one line: who, then the message formatted as fmt.Sprintf does.
func (p *Printer) Say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%.2fs] %s: %s\n", time.Since(p.start).Seconds(), who, fmt.Sprintf(format, args...))
}
