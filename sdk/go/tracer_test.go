package spanprof

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// goroutineLabels returns the pprof labels of the calling goroutine as the
// Go runtime reports them in the goroutine profile: this observes the real
// g.labels, not the SDK's own bookkeeping.
//
//go:noinline
func goroutineLabels(t testing.TB) map[string]string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Errorf("write goroutine profile: %v", err)
		return nil
	}
	// debug=1 groups goroutines into blocks: "N @ pcs", optional
	// "# labels: {...}", then "#\tpc\tfunc\tfile:line" frames.
	var labels string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.Contains(line, " @ "):
			labels = ""
		case strings.HasPrefix(line, "# labels: "):
			labels = strings.TrimPrefix(line, "# labels: ")
		case strings.Contains(line, "/sdk/go.goroutineLabels+"):
			got := map[string]string{}
			if labels != "" {
				if err := json.Unmarshal([]byte(labels), &got); err != nil {
					t.Errorf("parse labels %q: %v", labels, err)
				}
			}
			return got
		}
	}
	// Errorf, not Fatal: this runs on goroutines other than the test's.
	t.Error("calling goroutine not found in goroutine profile")
	return nil
}

func spanLabels(s trace.Span, name string) map[string]string {
	sc := s.SpanContext()
	return map[string]string{
		LabelTraceID:  sc.TraceID().String(),
		LabelSpanID:   sc.SpanID().String(),
		LabelSpanName: name,
	}
}

func equalLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func newProvider(t testing.TB) *TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return NewTracerProvider(tp)
}

// runOnFreshGoroutine runs f on a goroutine without inherited labels, so
// tests do not depend on the labels of the test runner's goroutine.
func runOnFreshGoroutine(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

func TestStartEndLabels(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, tr trace.Tracer)
	}{
		{"root span sets and End clears", func(t *testing.T, tr trace.Tracer) {
			_, s := tr.Start(context.Background(), "root")
			if got, want := goroutineLabels(t), spanLabels(s, "root"); !equalLabels(got, want) {
				t.Errorf("in span: labels %v, want %v", got, want)
			}
			if len(s.SpanContext().TraceID().String()) != 32 || strings.ToLower(s.SpanContext().TraceID().String()) != s.SpanContext().TraceID().String() {
				t.Errorf("trace id not lowercase 32-hex")
			}
			s.End()
			if got := goroutineLabels(t); len(got) != 0 {
				t.Errorf("after End: labels %v, want none", got)
			}
		}},
		{"child restores parent on End", func(t *testing.T, tr trace.Tracer) {
			ctx, parent := tr.Start(context.Background(), "parent")
			_, child := tr.Start(ctx, "child")
			if got, want := goroutineLabels(t), spanLabels(child, "child"); !equalLabels(got, want) {
				t.Errorf("in child: labels %v, want %v", got, want)
			}
			if child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("child has another trace id")
			}
			child.End()
			if got, want := goroutineLabels(t), spanLabels(parent, "parent"); !equalLabels(got, want) {
				t.Errorf("after child End: labels %v, want parent's %v", got, want)
			}
			parent.End()
			if got := goroutineLabels(t); len(got) != 0 {
				t.Errorf("after parent End: labels %v, want none", got)
			}
		}},
		{"End through SpanFromContext", func(t *testing.T, tr trace.Tracer) {
			ctx, _ := tr.Start(context.Background(), "s")
			trace.SpanFromContext(ctx).End()
			if got := goroutineLabels(t); len(got) != 0 {
				t.Errorf("after End: labels %v, want none", got)
			}
		}},
		{"user labels kept and restored", func(t *testing.T, tr trace.Tracer) {
			pprof.Do(context.Background(), pprof.Labels("worker", "w1"), func(ctx context.Context) {
				_, s := tr.Start(ctx, "job")
				want := spanLabels(s, "job")
				want["worker"] = "w1"
				if got := goroutineLabels(t); !equalLabels(got, want) {
					t.Errorf("in span: labels %v, want %v", got, want)
				}
				s.End()
				if got, want := goroutineLabels(t), map[string]string{"worker": "w1"}; !equalLabels(got, want) {
					t.Errorf("after End: labels %v, want %v", got, want)
				}
			})
		}},
		{"returned context carries labels", func(t *testing.T, tr trace.Tracer) {
			ctx, s := tr.Start(context.Background(), "ctx")
			defer s.End()
			for k, want := range spanLabels(s, "ctx") {
				if got, ok := pprof.Label(ctx, k); !ok || got != want {
					t.Errorf("pprof.Label(ctx, %q) = %q, %v; want %q", k, got, ok, want)
				}
			}
		}},
		{"goroutines started inside inherit", func(t *testing.T, tr trace.Tracer) {
			_, s := tr.Start(context.Background(), "spawner")
			want := spanLabels(s, "spawner")
			var wg sync.WaitGroup
			for i := 0; i < 4; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if got := goroutineLabels(t); !equalLabels(got, want) {
						t.Errorf("child goroutine: labels %v, want %v", got, want)
					}
				}()
			}
			wg.Wait()
			s.End()
			runOnFreshGoroutine(func() {}) // a goroutine started after End...
			go func() {}()
			done := make(chan map[string]string)
			go func() { done <- goroutineLabels(t) }()
			if got := <-done; len(got) != 0 {
				t.Errorf("goroutine started after End: labels %v, want none", got)
			}
		}},
		{"End on another goroutine leaves it alone", func(t *testing.T, tr trace.Tracer) {
			_, s := tr.Start(context.Background(), "moved")
			want := spanLabels(s, "moved")
			done := make(chan map[string]string)
			go func() {
				pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("other", "x")))
				s.End()
				done <- goroutineLabels(t)
			}()
			if got := <-done; !equalLabels(got, map[string]string{"other": "x"}) {
				t.Errorf("ending goroutine: labels %v, want its own", got)
			}
			if got := goroutineLabels(t); !equalLabels(got, want) {
				t.Errorf("starting goroutine: labels %v, want %v", got, want)
			}
		}},
	}
	tr := newProvider(t).Tracer("test")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runOnFreshGoroutine(func() { tt.run(t, tr) })
		})
	}
}

func TestNoopProviderLeavesLabels(t *testing.T) {
	tr := NewTracerProvider(noop.NewTracerProvider()).Tracer("noop")
	runOnFreshGoroutine(func() {
		_, s := tr.Start(context.Background(), "nothing")
		if got := goroutineLabels(t); len(got) != 0 {
			t.Errorf("noop span: labels %v, want none", got)
		}
		s.End()
	})
}

func TestSpanTracerProviderKeepsWrapping(t *testing.T) {
	tr := newProvider(t).Tracer("test")
	runOnFreshGoroutine(func() {
		_, s := tr.Start(context.Background(), "a")
		defer s.End()
		_, s2 := s.TracerProvider().Tracer("b").Start(context.Background(), "b")
		defer s2.End()
		if got, want := goroutineLabels(t), spanLabels(s2, "b"); !equalLabels(got, want) {
			t.Errorf("labels %v, want %v", got, want)
		}
	})
}

// BenchmarkStartEnd measures a span start+end with the plain SDK and with
// the wrapper; the difference is the cost of publishing labels. Besides
// wall-clock ns/op it reports cpu-ns/op (process CPU time, GC included),
// which stays meaningful on a loaded machine where ns/op also counts time
// spent waiting for a CPU.
func BenchmarkStartEnd(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	ctx := context.Background()
	for _, bb := range []struct {
		name string
		tr   trace.Tracer
	}{
		{"plain", sdk.Tracer("bench")},
		{"labels", NewTracerProvider(sdk).Tracer("bench")},
	} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPU()
			for i := 0; i < b.N; i++ {
				_, s := bb.tr.Start(ctx, "op")
				s.End()
			}
			cpu.report(b)
		})
		b.Run(bb.name+"/nested", func(b *testing.B) {
			pctx, parent := bb.tr.Start(ctx, "parent")
			defer parent.End()
			b.ReportAllocs()
			cpu := startCPU()
			for i := 0; i < b.N; i++ {
				_, s := bb.tr.Start(pctx, "op")
				s.End()
			}
			cpu.report(b)
		})
	}
}

// BenchmarkLabelsOnly measures what the wrapper adds to a span, without
// the SDK around it: encode the ids, derive and install the labels, wrap
// the span, restore on End.
func BenchmarkLabelsOnly(b *testing.B) {
	tr := NewTracerProvider(fixedIDs{}).Tracer("bench")
	ctx := context.Background()
	b.ReportAllocs()
	cpu := startCPU()
	for i := 0; i < b.N; i++ {
		_, s := tr.Start(ctx, "op")
		s.End()
	}
	cpu.report(b)
}

// fixedIDs is a provider whose spans cost nothing but carry a valid
// context, isolating the wrapper's cost.
type fixedIDs struct{ noop.TracerProvider }

func (fixedIDs) Tracer(string, ...trace.TracerOption) trace.Tracer { return fixedTracer{} }

type fixedTracer struct{ noop.Tracer }

var fixedSpan = func() trace.Span {
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	})
	_, s := noop.NewTracerProvider().Tracer("").Start(trace.ContextWithSpanContext(context.Background(), sc), "x")
	return s
}()

func (fixedTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	return ctx, fixedSpan
}

type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
}
