package tracing

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobguard/jobguard/guard/observe"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace/noop"
)

// seriesIndex and nameSeries list the cached series in the same order.
func TestSeriesIndex(t *testing.T) {
	for i, sk := range nameSeries {
		if got := seriesIndex(sk.key, sk.val); got != i {
			t.Errorf("seriesIndex(%s, %s) = %d, want %d", sk.key, sk.val, got, i)
		}
	}
	if got := seriesIndex(attrResult, "held"); got != -1 {
		t.Errorf("seriesIndex of an unlisted series = %d, want -1", got)
	}
}

// Past the caches' bounds every name still gets its own series, and the
// caches stop growing.
func TestSeriesCachesAreBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	o := New(WithTracerProvider(noop.NewTracerProvider()), WithMeterProvider(mp)).(*observer)

	names := maxCachedNames + maxCachedSets + 10
	for i := range names {
		name := fmt.Sprintf("tenant-%d", i)
		o.Event(t.Context(), observe.Held, observe.Info{Name: name, Delta: +1})
		// An unlisted series goes to the cache of single sets.
		o.Event(t.Context(), observe.RoundTrip, observe.Info{Name: name, Op: "acquire", Err: context.Canceled})
	}
	if n := o.cachedNames.Load(); n != maxCachedNames {
		t.Errorf("%d names cached, want %d", n, maxCachedNames)
	}
	if n := o.cachedSets.Load(); n != maxCachedSets {
		t.Errorf("%d single sets cached, want %d", n, maxCachedSets)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string]int{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				if dp.Value != 1 {
					t.Errorf("%s %v = %d, want 1", m.Name, dp.Attributes.ToSlice(), dp.Value)
				}
			}
			points[m.Name] = len(d.DataPoints)
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				if v, _ := dp.Attributes.Value(attrErrorType); v.AsString() != "canceled" {
					t.Errorf("%s %v: want error.type canceled", m.Name, dp.Attributes.ToSlice())
				}
			}
			points[m.Name] = len(d.DataPoints)
		}
	}
	if points["jobguard.lock.count"] != names || points["jobguard.lock.operation.duration"] != names {
		t.Errorf("series %v, want %d of each", points, names)
	}
}
