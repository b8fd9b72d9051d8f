package exampleenv

import (
	"context"
	"io"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/tracing"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing returns the options that make a guard.Locker report its lock
// operations as OpenTelemetry spans, printed as JSON to w (indented when
// pretty) by the stdout exporter. The SDK TracerProvider behind them exports
// synchronously, so each span is printed as it ends and none is left
// unprinted when a program exits without calling shutdown. shutdown shuts
// the provider down; call it after closing every Locker made with opts.
func Tracing(w io.Writer, pretty bool) (opts []guard.Option, shutdown func(), err error) {
	exporterOpts := []stdouttrace.Option{stdouttrace.WithWriter(w)}
	if pretty {
		exporterOpts = append(exporterOpts, stdouttrace.WithPrettyPrint())
	}
	exporter, err := stdouttrace.New(exporterOpts...)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	opts = []guard.Option{guard.WithObserver(tracing.New(tracing.WithTracerProvider(tp)))}
	return opts, func() { _ = tp.Shutdown(context.Background()) }, nil
}
