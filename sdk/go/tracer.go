package spanprof

import (
	"context"
	"encoding/hex"
	"runtime/pprof"
	"unsafe"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Label keys published on the goroutine. The profiler reads them by these
// exact names; they are sorted so pprof.Labels takes its allocation-free
// fast path (it sorts and de-duplicates otherwise).
const (
	LabelSpanID   = "span_id"
	LabelSpanName = "span_name"
	LabelTraceID  = "trace_id"
)

// TracerProvider wraps another trace.TracerProvider so that its spans are
// visible to a profiler through goroutine labels. It is safe for concurrent
// use, like the provider it wraps.
type TracerProvider struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

// NewTracerProvider returns tp wrapped so that every span started from its
// tracers publishes its trace context in the goroutine labels. Shutdown,
// ForceFlush and other methods of the concrete provider stay on tp: keep a
// reference to it for those.
func NewTracerProvider(tp trace.TracerProvider) *TracerProvider {
	return &TracerProvider{tp: tp}
}

// Tracer returns a tracer of the wrapped provider whose Start publishes the
// span to the goroutine labels.
func (p *TracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &tracer{t: p.tp.Tracer(name, opts...)}
}

// Unwrap returns the wrapped provider, for callers that need its concrete
// type (for example to shut it down).
func (p *TracerProvider) Unwrap() trace.TracerProvider { return p.tp }

type tracer struct {
	embedded.Tracer
	t trace.Tracer
}

// Start starts the span on the wrapped tracer, then sets the goroutine's
// labels to the parent's labels (from ctx) plus trace_id, span_id and
// span_name of the new span. Spans without a valid span context (a no-op
// provider) leave the labels alone.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, span := t.t.Start(ctx, name, opts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return ctx, span
	}
	ids := encodeIDs(sc.TraceID(), sc.SpanID())
	ctx = pprof.WithLabels(ctx, pprof.Labels(
		LabelSpanID, ids[32:],
		LabelSpanName, name,
		LabelTraceID, ids[:32],
	))
	prev := getProfLabel()
	pprof.SetGoroutineLabels(ctx)
	s := &labeledSpan{Span: span, prev: prev, set: getProfLabel()}
	return trace.ContextWithSpan(ctx, s), s
}

// encodeIDs returns the 32 hex digits of the trace ID followed by the 16 of
// the span ID in one string, so both labels share a single allocation.
func encodeIDs(tid trace.TraceID, sid trace.SpanID) string {
	var buf [48]byte
	hex.Encode(buf[:32], tid[:])
	hex.Encode(buf[32:], sid[:])
	return string(buf[:])
}

// labeledSpan is the wrapped span plus what End needs to undo Start.
type labeledSpan struct {
	trace.Span
	prev unsafe.Pointer // g.labels before Start
	set  unsafe.Pointer // g.labels Start installed
}

// End ends the span and, when called on the goroutine that started it while
// that goroutine still carries the span's labels, restores the labels it had
// before Start. A span ended on another goroutine, or after the goroutine's
// labels were changed by someone else (a child span still open, pprof.Do),
// leaves the labels of the calling goroutine untouched: restoring there
// would attribute that goroutine's samples to the wrong span.
func (s *labeledSpan) End(opts ...trace.SpanEndOption) {
	s.Span.End(opts...)
	if getProfLabel() == s.set {
		setProfLabel(s.prev)
	}
}

// TracerProvider returns the wrapping provider, so that tracers obtained
// from a span (span.TracerProvider().Tracer(...)) keep publishing labels.
func (s *labeledSpan) TracerProvider() trace.TracerProvider {
	return &TracerProvider{tp: s.Span.TracerProvider()}
}
