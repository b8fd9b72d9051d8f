package exampleenv

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// maxTreeSpans bounds how many spans SpanTree keeps; it counts the rest.
const maxTreeSpans = 10000

// SpanTree returns the options that make a guard.Locker report its lock
// operations as OpenTelemetry spans, kept in memory as they end. print shuts
// the TracerProvider down and writes the spans to w as a tree: one line per
// span with its start (seconds since SpanTree was called), duration and
// attributes, its events and child spans below it, in order of time. Call
// print once, after closing every Locker made with opts.
func SpanTree(w io.Writer) (opts []guard.Option, print func(), err error) {
	origin := time.Now()
	c := &spanCollector{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(c))
	opts = []guard.Option{guard.WithObserver(tracing.New(tracing.WithTracerProvider(tp)))}
	return opts, func() {
		_ = tp.Shutdown(context.Background())
		spans, dropped := c.collected()
		writeTree(w, origin, spans)
		if dropped > 0 {
			fmt.Fprintf(w, "(%d more spans not kept)\n", dropped)
		}
	}, nil
}

// spanCollector is a SpanProcessor that keeps the first maxTreeSpans ended
// spans.
type spanCollector struct {
	mu      sync.Mutex
	spans   []sdktrace.ReadOnlySpan
	dropped int
}

func (c *spanCollector) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (c *spanCollector) OnEnd(s sdktrace.ReadOnlySpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.spans) < maxTreeSpans {
		c.spans = append(c.spans, s)
	} else {
		c.dropped++
	}
}

func (c *spanCollector) Shutdown(context.Context) error   { return nil }
func (c *spanCollector) ForceFlush(context.Context) error { return nil }

func (c *spanCollector) collected() ([]sdktrace.ReadOnlySpan, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.spans), c.dropped
}

// writeTree writes spans to w as a tree, times counted from origin. A span
// whose parent is not among spans is a root.
func writeTree(w io.Writer, origin time.Time, spans []sdktrace.ReadOnlySpan) {
	fmt.Fprintf(w, "--- %d spans (start in seconds since tracing began, then duration)\n", len(spans))
	ids := make(map[trace.SpanID]bool, len(spans))
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	children := make(map[trace.SpanID][]sdktrace.ReadOnlySpan)
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if p := s.Parent(); p.IsValid() && ids[p.SpanID()] {
			children[p.SpanID()] = append(children[p.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	t := treeWriter{w: w, origin: origin, children: children}
	for _, r := range byStart(roots) {
		t.span(r, "", "")
	}
}

type treeWriter struct {
	w        io.Writer
	origin   time.Time
	children map[trace.SpanID][]sdktrace.ReadOnlySpan
}

// span writes s's line after lead, then its events and children, each
// line after indent.
func (t treeWriter) span(s sdktrace.ReadOnlySpan, lead, indent string) {
	line := fmt.Sprintf("%s%s  %s +%s", lead, s.Name(), t.at(s.StartTime()), duration(s.EndTime().Sub(s.StartTime())))
	if a := attrs(s.Attributes()); a != "" {
		line += "  " + a
	}
	if st := s.Status(); st.Code == codes.Error {
		line += "  ERROR " + strconv.Quote(st.Description)
	}
	fmt.Fprintln(t.w, line)

	// Events and child spans, in order of time.
	type item struct {
		at    time.Time
		event *sdktrace.Event
		span  sdktrace.ReadOnlySpan
	}
	var items []item
	for _, e := range s.Events() {
		items = append(items, item{at: e.Time, event: &e})
	}
	for _, c := range t.children[s.SpanContext().SpanID()] {
		items = append(items, item{at: c.StartTime(), span: c})
	}
	slices.SortStableFunc(items, func(a, b item) int { return a.at.Compare(b.at) })
	for i, it := range items {
		branch, more := "├─ ", "│  "
		if i == len(items)-1 {
			branch, more = "└─ ", "   "
		}
		if it.event != nil {
			line := fmt.Sprintf("%s%s* event %s  %s", indent, branch, it.event.Name, t.at(it.at))
			if a := attrs(it.event.Attributes); a != "" {
				line += "  " + a
			}
			fmt.Fprintln(t.w, line)
			continue
		}
		t.span(it.span, indent+branch, indent+more)
	}
}

// at formats a time as seconds since the origin.
func (t treeWriter) at(x time.Time) string {
	return fmt.Sprintf("%.3fs", x.Sub(t.origin).Seconds())
}

func byStart(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	return slices.SortedStableFunc(slices.Values(spans), func(a, b sdktrace.ReadOnlySpan) int {
		return a.StartTime().Compare(b.StartTime())
	})
}

// duration formats d to about three significant digits.
func duration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Microsecond).String()
	}
}

// attrs formats attributes as k=v, jobguard.lock.key first and the rest
// by name, dropping the "jobguard.lock." prefix, a name equal to the key
// and reentrant=false, which say nothing new.
func attrs(kvs []attribute.KeyValue) string {
	var key string
	for _, kv := range kvs {
		if kv.Key == "jobguard.lock.key" {
			key = kv.Value.Emit()
		}
	}
	kvs = slices.SortedFunc(slices.Values(kvs), func(a, b attribute.KeyValue) int {
		return cmp.Or(
			cmp.Compare(btoi(a.Key != "jobguard.lock.key"), btoi(b.Key != "jobguard.lock.key")),
			cmp.Compare(a.Key, b.Key))
	})
	var out []string
	for _, kv := range kvs {
		k := strings.TrimPrefix(string(kv.Key), "jobguard.lock.")
		v := kv.Value.Emit()
		switch {
		case k == "name" && v == key, k == "reentrant" && v == "false":
			continue
		case k == "ttl" && kv.Value.Type() == attribute.FLOAT64:
			v = (time.Duration(kv.Value.AsFloat64() * float64(time.Second))).String()
		case kv.Value.Type() == attribute.STRING && (v == "" || strings.ContainsAny(v, " \t\n\"=")):
			v = strconv.Quote(v)
		}
		out = append(out, k+"="+v)
	}
	return strings.Join(out, " ")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
