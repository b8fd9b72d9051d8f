// Package tracing reports every guard lock operation to OpenTelemetry.
//
//	locker, err := guard.New(client, guard.WithObserver(tracing.New()))
//
// A WithLock becomes a span "jobguard.run" (the job's own spans are its
// children) with children "jobguard.lock.acquire" (the whole wait) and
// "jobguard.lock.release". Renewals are not spans: a failed renewal and a
// lost lease are events on the run span, and a lost lease sets its status
// to Error. A run skipped because the key was busy, or answered from its
// claim (guard.Locker.WithClaim, result "claimed"), leaves the status Unset.
//
// Metrics: jobguard.lock.acquire.duration, jobguard.lock.hold.duration and
// jobguard.lock.operation.duration (histograms, seconds) and
// jobguard.lock.count (up-down counter of waiting and held leases). They
// carry jobguard.lock.name, never jobguard.lock.key. The name is guard.Name,
// or the key when none is given: give a Name to locks whose keys carry ids
// (the adapters do), or every id becomes a metric series.
//
// This is the only package of jobguard that imports OpenTelemetry.
package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/jobguard/jobguard/tracing"

// Span, event and attribute names.
const (
	spanRun     = "jobguard.run"
	spanAcquire = "jobguard.lock.acquire"
	spanRelease = "jobguard.lock.release"

	eventRenewFailed = "jobguard.lock.renew_failed"
	eventLost        = "jobguard.lock.lost"

	attrKey       = attribute.Key("jobguard.lock.key")
	attrName      = attribute.Key("jobguard.lock.name")
	attrTTL       = attribute.Key("jobguard.lock.ttl")
	attrToken     = attribute.Key("jobguard.lock.fencing_token")
	attrReentrant = attribute.Key("jobguard.lock.reentrant")
	attrMode      = attribute.Key("jobguard.lock.mode")
	attrResult    = attribute.Key("jobguard.lock.acquire.result")
	attrAttempts  = attribute.Key("jobguard.lock.acquire.attempts")
	attrRenewals  = attribute.Key("jobguard.lock.renewals")
	attrHold      = attribute.Key("jobguard.lock.hold.result")
	attrOperation = attribute.Key("jobguard.lock.operation")
	attrState     = attribute.Key("jobguard.lock.state")
	attrErrorType = attribute.Key("error.type")
)

// Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider sets the tracer provider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the meter provider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// observer implements guard.Observer.
type observer struct {
	tracer      trace.Tracer
	acquireTime metric.Float64Histogram
	holdTime    metric.Float64Histogram
	opTime      metric.Float64Histogram
	count       metric.Int64UpDownCounter
	kind        trace.SpanStartOption   // every span is INTERNAL
	childStart  []trace.SpanStartOption // a child span on its run's key: the kind alone

	// The metric attribute sets are cached, so that a measurement builds
	// none: per lock name, every series guard reports for it (nameSeries),
	// built at the name's first measurement; and single sets for the rest,
	// such as failed round trips. Lock names are low in cardinality by
	// contract, but one left at its default (the key) may carry an id: both
	// caches are bounded, and past their bounds a measurement builds its set.
	// The name found last is kept beside the map, so that a process using
	// one name at a time finds it without hashing; one that alternates
	// names pays a pointer store per change.
	names       sync.Map                // lock name -> *nameSet
	last        atomic.Pointer[nameSet] // the name found last, compared before hashing
	sets        sync.Map                // setKey -> *series
	cachedNames atomic.Int64            // entries in names, at most maxCachedNames
	cachedSets  atomic.Int64            // entries in sets, at most maxCachedSets
}

// Bounds of the attribute-set caches: a name's twelve series take about
// 2.7 KB, a single set about 230 bytes, so at most about 0.6 MB in all.
const (
	maxCachedNames = 128
	maxCachedSets  = 1024
)

// setKey names the attributes of one metric series: the lock name and one
// more attribute.
type setKey struct {
	name string
	key  attribute.Key
	val  string
	err  string // error.type, if any
}

// nameSeries lists the series guard reports for every lock name, in the
// order of seriesIndex.
var nameSeries = [...]struct {
	key attribute.Key
	val string
}{
	{attrResult, "acquired"}, {attrResult, "busy"}, {attrResult, "timeout"}, {attrResult, "canceled"}, {attrResult, "error"},
	{attrState, "held"}, {attrState, "waiting"},
	{attrHold, "released"}, {attrHold, "lost"},
	{attrOperation, "acquire"}, {attrOperation, "renew"}, {attrOperation, "release"},
}

// seriesIndex returns the index in nameSeries of the series with val for
// key, or -1.
func seriesIndex(key attribute.Key, val string) int {
	switch key {
	case attrResult:
		switch val {
		case "acquired":
			return 0
		case "busy":
			return 1
		case "timeout":
			return 2
		case "canceled":
			return 3
		case "error":
			return 4
		}
	case attrState:
		switch val {
		case "held":
			return 5
		case "waiting":
			return 6
		}
	case attrHold:
		switch val {
		case "released":
			return 7
		case "lost":
			return 8
		}
	case attrOperation:
		switch val {
		case "acquire":
			return 9
		case "renew":
			return 10
		case "release":
			return 11
		}
	}
	return -1
}

// series holds the option carrying one series' attributes, as the slices
// Record and Add take, so that passing it allocates nothing.
type series struct {
	record []metric.RecordOption
	add    []metric.AddOption
}

func newSeries(k setKey) *series {
	kvs := []attribute.KeyValue{k.key.String(k.val)}
	if k.name != "" {
		kvs = append(kvs, attrName.String(k.name))
	}
	if k.err != "" {
		kvs = append(kvs, attrErrorType.String(k.err))
	}
	opt := metric.WithAttributeSet(attribute.NewSet(kvs...))
	return &series{record: []metric.RecordOption{opt}, add: []metric.AddOption{opt}}
}

// attrs returns the options carrying the series' attributes, cached when
// the bounds allow.
func (o *observer) attrs(k setKey) *series {
	if i := seriesIndex(k.key, k.val); i >= 0 && k.err == "" {
		if byName := o.seriesOf(k.name); byName != nil {
			return byName[i]
		}
	}
	if v, ok := o.sets.Load(k); ok {
		return v.(*series)
	}
	s := newSeries(k)
	if o.cachedSets.Load() >= maxCachedSets {
		return s
	}
	if v, loaded := o.sets.LoadOrStore(k, s); loaded {
		return v.(*series)
	}
	o.cachedSets.Add(1)
	return s
}

// nameSet is the series of one lock name listed in nameSeries.
type nameSet struct {
	name   string
	series [len(nameSeries)]*series
}

// seriesOf returns the series of name listed in nameSeries, or nil when
// the name cache is full.
func (o *observer) seriesOf(name string) *[len(nameSeries)]*series {
	if l := o.last.Load(); l != nil && l.name == name {
		return &l.series
	}
	if v, ok := o.names.Load(name); ok {
		ns := v.(*nameSet)
		o.last.Store(ns)
		return &ns.series
	}
	if o.cachedNames.Load() >= maxCachedNames {
		return nil
	}
	ns := &nameSet{name: name}
	for i, sk := range nameSeries {
		ns.series[i] = newSeries(setKey{name: name, key: sk.key, val: sk.val})
	}
	if v, loaded := o.names.LoadOrStore(name, ns); loaded {
		return &v.(*nameSet).series
	}
	o.cachedNames.Add(1)
	return &ns.series
}

// New returns an Observer for guard.WithObserver. Providers not given are
// the global ones, resolved now.
func New(opts ...Option) guard.Observer {
	var c config
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	meter := c.mp.Meter(ScopeName)
	o := &observer{tracer: c.tp.Tracer(ScopeName), kind: trace.WithSpanKind(trace.SpanKindInternal)}
	o.childStart = []trace.SpanStartOption{o.kind}
	// Instrument errors only come from invalid names or options, which are
	// constants here; the API returns a working no-op instrument with them.
	o.acquireTime, _ = meter.Float64Histogram("jobguard.lock.acquire.duration",
		metric.WithUnit("s"), metric.WithDescription("Time from asking for a lock to getting it or giving up."),
		metric.WithExplicitBucketBoundaries(waitBuckets...))
	o.holdTime, _ = meter.Float64Histogram("jobguard.lock.hold.duration",
		metric.WithUnit("s"), metric.WithDescription("Time a lease was held, until released or lost."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	o.opTime, _ = meter.Float64Histogram("jobguard.lock.operation.duration",
		metric.WithUnit("s"), metric.WithDescription("Round trip of one acquire, renew or release request."),
		metric.WithExplicitBucketBoundaries(roundTripBuckets...))
	o.count, _ = meter.Int64UpDownCounter("jobguard.lock.count",
		metric.WithUnit("{lock}"), metric.WithDescription("Leases held and acquisitions waiting."))
	return o
}

var (
	roundTripBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	waitBuckets      = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets      = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600}
)

// phase is what Begin leaves in the context of a Run or an Acquire for End
// and for the phases inside a run. It is that context too: the tracer's,
// with the phase as a value, in one allocation where context.WithValue
// would take a second. A Release begins no phase: its End needs only the
// span, which the tracer's context carries.
type phase struct {
	context.Context // the tracer's context, carrying span
	span            trace.Span
	start           time.Time // Acquire only, for its duration
	run             bool
	key             string
	// attrs holds the attributes Begin gives the span, then those End sets,
	// so that neither allocates more. Reusing it is safe: Start options
	// are read only through trace.NewSpanStartConfig, which copies their
	// attributes, so the tracer keeps none of the array. Its length covers
	// the run span's three and the adapters' guard.Attrs (at most three).
	attrs [6]attribute.KeyValue
	opts  [2]trace.SpanStartOption
}

type phaseKey struct{}

// Value returns the phase itself for phaseKey, and the tracer context's
// values for any other key.
func (p *phase) Value(key any) any {
	if key == (phaseKey{}) {
		return p
	}
	return p.Context.Value(key)
}

// phaseOf returns the phase ctx carries, or nil. guard hands each phase
// the context Begin returned for its parent, so the first test mostly
// answers without walking the context chain.
func phaseOf(ctx context.Context) *phase {
	if ph, ok := ctx.(*phase); ok {
		return ph
	}
	ph, _ := ctx.Value(phaseKey{}).(*phase)
	return ph
}

func (o *observer) Begin(ctx context.Context, p observe.Phase, info observe.Info) context.Context {
	// The run span describes the lock; its own children add only what is
	// theirs. An operation on another key inside the job says which.
	child := p != observe.Run && childOfRunOn(ctx, info.Key)
	if p == observe.Release {
		start := o.childStart
		if !child {
			start = []trace.SpanStartOption{o.kind, trace.WithAttributes(lockAttrs(nil, info)...)}
		}
		ctx, _ = o.tracer.Start(ctx, spanRelease, start...)
		return ctx
	}
	ph := &phase{run: p == observe.Run, key: info.Key}
	name, start := spanAcquire, o.childStart
	if p == observe.Run {
		name = spanRun
	}
	if !child {
		attrs := ph.attrs[:0]
		if p == observe.Run {
			if n := 3 + len(info.Attrs); n > len(ph.attrs) {
				attrs = make([]attribute.KeyValue, 0, n)
			}
			attrs = appendSlog(lockAttrs(attrs, info), info.Attrs)
		} else {
			attrs = lockAttrs(attrs, info)
		}
		ph.opts = [2]trace.SpanStartOption{o.kind, trace.WithAttributes(attrs...)}
		start = ph.opts[:]
	}
	ph.Context, ph.span = o.tracer.Start(ctx, name, start...)
	if p == observe.Acquire {
		ph.start = time.Now()
	}
	return ph
}

// lockAttrs appends the attributes that describe the lock of info to dst.
func lockAttrs(dst []attribute.KeyValue, info observe.Info) []attribute.KeyValue {
	return append(dst, attrKey.String(info.Key), attrName.String(info.Name), attrMode.String(mode(info)))
}

// childOfRunOn reports whether ctx is inside the run phase of key.
func childOfRunOn(ctx context.Context, key string) bool {
	parent := phaseOf(ctx)
	return parent != nil && parent.run && parent.key == key
}

func (o *observer) End(ctx context.Context, p observe.Phase, info observe.Info) {
	if p == observe.Release {
		// Begin's context: the tracer's, carrying the release span.
		span := trace.SpanFromContext(ctx)
		if info.Err != nil && span.IsRecording() {
			failed(span, info.Err)
		}
		span.End()
		return
	}
	ph := phaseOf(ctx)
	if ph == nil {
		return
	}
	span := ph.span
	if p == observe.Acquire && o.acquireTime.Enabled(ctx) {
		o.acquireTime.Record(ctx, time.Since(ph.start).Seconds(),
			o.attrs(setKey{name: info.Name, key: attrResult, val: info.Result}).record...)
	}
	if span.IsRecording() {
		ph.describe(p, info)
	}
	span.End()
}

// describe sets what End knows on the phase's span.
func (ph *phase) describe(p observe.Phase, info observe.Info) {
	span, attrs := ph.span, ph.attrs[:0]
	switch p {
	case observe.Acquire:
		attrs = append(attrs, attrResult.String(info.Result), attrAttempts.Int(info.Attempts))
		if info.Token != 0 {
			attrs = append(attrs, attrToken.Int64(info.Token), attrReentrant.Bool(info.Reentrant))
		}
		span.SetAttributes(attrs...)
		if info.Result == "error" {
			failed(span, info.Err)
		}
	case observe.Run:
		switch info.Result {
		case "busy", "timeout", "canceled", "claimed": // skipped, not failed
			span.SetAttributes(append(attrs, attrResult.String(info.Result))...)
		case "error": // could not acquire: Redis or input failed
			span.SetAttributes(append(attrs, attrResult.String(info.Result))...)
			failed(span, info.Err)
		default:
			span.SetAttributes(append(attrs, attrReentrant.Bool(info.Reentrant), attrRenewals.Int(info.Renewals),
				attrToken.Int64(info.Token), attrTTL.Float64(info.TTL.Seconds()))...)
			if info.Err != nil {
				failed(span, info.Err)
			}
		}
	}
}

func (o *observer) Event(ctx context.Context, k observe.Event, info observe.Info) {
	switch k {
	case observe.RoundTrip:
		if !o.opTime.Enabled(ctx) {
			return
		}
		k := setKey{name: info.Name, key: attrOperation, val: info.Op}
		if info.Err != nil {
			k.err = ErrorType(info.Err)
		}
		o.opTime.Record(ctx, info.Duration.Seconds(), o.attrs(k).record...)
	case observe.RenewFailed:
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(eventRenewFailed, trace.WithAttributes(attrErrorType.String(ErrorType(info.Err))))
		}
	case observe.LeaseLost:
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(eventLost, trace.WithAttributes(attrErrorType.String(ErrorType(info.Err))))
		}
	case observe.Held:
		if o.count.Enabled(ctx) {
			o.count.Add(ctx, int64(info.Delta), o.attrs(setKey{name: info.Name, key: attrState, val: "held"}).add...)
		}
		if info.Delta < 0 && o.holdTime.Enabled(ctx) {
			o.holdTime.Record(ctx, info.Duration.Seconds(), o.attrs(setKey{name: info.Name, key: attrHold, val: info.Result}).record...)
		}
	case observe.Waiting:
		if o.count.Enabled(ctx) {
			o.count.Add(ctx, int64(info.Delta), o.attrs(setKey{name: info.Name, key: attrState, val: "waiting"}).add...)
		}
	}
}

func failed(span trace.Span, err error) {
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(attrErrorType.String(ErrorType(err)))
}

func mode(info observe.Info) string {
	if info.Write {
		return "write"
	}
	return "read"
}

// ErrorType returns the stable error.type value for err: the name of the
// guard sentinel it matches ("lease_lost", "not_acquired", ...),
// "canceled" or "deadline_exceeded" for context errors, and "_OTHER" for
// anything else (such as the job's own error).
func ErrorType(err error) string {
	for _, e := range errorTypes {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	return "_OTHER"
}

// errorTypes is ordered: a lost lease also wraps ErrClosed when Close
// caused it, and a failed wait wraps the context's error.
var errorTypes = []struct {
	err  error
	name string
}{
	{guard.ErrLeaseLost, "lease_lost"},
	{guard.ErrNotAcquired, "not_acquired"},
	{guard.ErrNotHeld, "not_held"},
	{guard.ErrUpgrade, "upgrade"},
	{guard.ErrClosed, "closed"},
	{guard.ErrWrongType, "wrong_type"},
	{guard.ErrNotReplicated, "not_replicated"},
	{guard.ErrInvalid, "invalid"},
	{context.Canceled, "canceled"},
	{context.DeadlineExceeded, "deadline_exceeded"},
}

// appendSlog appends the attributes an adapter passed with guard.Attrs to
// dst as span attributes.
func appendSlog(dst []attribute.KeyValue, attrs []slog.Attr) []attribute.KeyValue {
	for _, a := range attrs {
		v := a.Value.Resolve()
		switch v.Kind() {
		case slog.KindString:
			dst = append(dst, attribute.String(a.Key, v.String()))
		case slog.KindInt64:
			dst = append(dst, attribute.Int64(a.Key, v.Int64()))
		case slog.KindUint64:
			dst = append(dst, attribute.Int64(a.Key, int64(v.Uint64())))
		case slog.KindFloat64:
			dst = append(dst, attribute.Float64(a.Key, v.Float64()))
		case slog.KindBool:
			dst = append(dst, attribute.Bool(a.Key, v.Bool()))
		case slog.KindDuration:
			dst = append(dst, attribute.Float64(a.Key, v.Duration().Seconds()))
		default:
			dst = append(dst, attribute.String(a.Key, v.String()))
		}
	}
	return dst
}
