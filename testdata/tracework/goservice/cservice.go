package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// cService calls the C service over HTTP and exports the span it reports
// through an SDK provider of its own (resource service.name c-service).
type cService struct {
	url    string
	sdk    *sdktrace.TracerProvider
	tracer trace.Tracer
	ids    *fixedID
}

// fixedID makes the SDK give the C service's span the id the C service
// chose and published to the profiler.
type fixedID struct{ next trace.SpanID }

func (f *fixedID) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	return trace.TraceID{}, f.next
}
func (f *fixedID) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return f.next }

func newCService(ctx context.Context, endpoint, url string) (*cService, error) {
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("create c-service exporter: %w", err)
	}
	ids := &fixedID{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(ids),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("c-service"))))
	return &cService{url: strings.TrimSuffix(url, "/"), sdk: tp, tracer: tp.Tracer("chttp"), ids: ids}, nil
}

// call runs GET /work with the caller's span in traceparent, prints the
// C span's ground truth and exports it.
func (c *cService) call(ctx context.Context, cpuMS, sleepMS int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/work?cpu_ms=%d&sleep_ms=%d", c.url, cpuMS, sleepMS), nil)
	if err != nil {
		return fmt.Errorf("build c-service request: %w", err)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("call c-service: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("call c-service: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var sidHex string
	var startNs, endNs, cpu, slept int64
	if _, err := fmt.Sscan(string(body), &sidHex, &startNs, &endNs, &cpu, &slept); err != nil {
		return fmt.Errorf("parse c-service answer %q: %w", body, err)
	}
	sid, err := hex.DecodeString(sidHex)
	if err != nil || len(sid) != 8 {
		return fmt.Errorf("parse c-service span id %q", sidHex)
	}
	c.ids.next = trace.SpanID(sid)
	_, s := c.tracer.Start(ctx, "GET /work", trace.WithTimestamp(time.Unix(0, startNs)), trace.WithSpanKind(trace.SpanKindServer))
	s.End(trace.WithTimestamp(time.Unix(0, endNs)))
	fmt.Printf("truth %s c-work %d %d\n", sidHex, cpu, slept)
	return nil
}
