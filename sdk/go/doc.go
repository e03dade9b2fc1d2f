// Package spanprof publishes the current OpenTelemetry span to the Go
// runtime's goroutine profiler labels, so that an eBPF profiler (spanprof)
// can stamp every CPU sample of a goroutine with the span it is executing.
//
// Wrap the application's TracerProvider once:
//
//	tp := sdktrace.NewTracerProvider(...)
//	otel.SetTracerProvider(spanprof.NewTracerProvider(tp))
//
// Every span started through the wrapper sets the goroutine labels
// trace_id and span_id (lowercase hex, as in W3C traceparent) and span_name
// on the calling goroutine; ending the span restores the labels the
// goroutine had before. Goroutines started inside a span inherit the labels
// (the Go runtime copies them at the go statement), and the context returned
// by Start carries them too, so pprof.Do and pprof.SetGoroutineLabels on
// that context keep the span's identity.
//
// Goroutines that outlive the span keep its labels too. A client's
// connection goroutines are the common case: wrap the dialer of an
// http.Transport with DetachDial so they carry no span.
//
// The labels are ordinary runtime/pprof labels: Go's own CPU profiler sees
// them as well.
package spanprof
