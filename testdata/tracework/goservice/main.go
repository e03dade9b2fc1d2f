// Command goservice is the Go side of the trace view test: an
// OpenTelemetry SDK service (spans exported over OTLP/gRPC to -endpoint)
// that publishes its spans to the profiler through sdk/go. For each line
// "req CPU_MS SLEEP_MS" on stdin it runs a trace:
//
//	handle request
//	├── go cpu       burns CPU_MS of thread CPU time
//	├── go sleep     time.Sleep(SLEEP_MS)
//	└── call c-service   prints "call TRACE_ID SPAN_ID", waits for "ok"
//
// and prints the ground truth of each span ("truth SPAN_ID NAME CPU_NS
// SLEEP_NS RUN_NS", RUN_NS the time a CPU burst was current on a CPU, see
// running), then "done TRACE_ID" once the spans are exported.
//
// With -c-url (the two-service example) the lines are "req GO_CPU_MS
// GO_SLEEP_MS C_CPU_MS C_SLEEP_MS" and "call c-service" is an HTTP GET of
// the C service (testdata/tracework/chttp) carrying the W3C traceparent
// header; the C service exports its own span. The call span's truth is
// the thread CPU time the call took and the rest of its wall time, spent
// parked waiting for the answer.
//
// With -next-url (the polyglot example) the lines are "req GO_CPU_MS
// GO_SLEEP_MS QUERY" and "call c-service" is "call next": an HTTP GET of
// NEXT_URL?QUERY carrying the traceparent header, whose service prints its
// own ground truth. In this mode each truth line also gives the span's
// thread, and the wall-clock bounds of its work ("... TID START_NS END_NS"),
// to judge which samples carry the span's ids.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"

	spanprof "github.com/spanprof/spanprof/sdk/go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

func threadCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// running is the monotonic clock less the time this thread has waited
// runnable (run_delay, the second field of /proc/thread-self/schedstat).
// Its difference over busy work is the time the thread was current on a
// CPU: what a CPU-clock sampler sees. Thread CPU time is less by the
// interrupt and steal time the kernel does not charge to the thread, which
// on a virtual machine can be a tenth of a short burst.
func running(epoch time.Time) time.Duration {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	var execNs, delayNs int64
	if err == nil {
		_, err = fmt.Sscan(string(b), &execNs, &delayNs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goservice: read /proc/thread-self/schedstat:", err)
		os.Exit(1)
	}
	return time.Since(epoch) - time.Duration(delayNs)
}

var sink uint64

// burn spins until d of thread CPU time has passed and returns the CPU
// time and the time current on a CPU that it took.
//
//go:noinline
func burn(d time.Duration) (cpu, run time.Duration) {
	epoch := time.Now()
	start, r0 := threadCPU(), running(epoch)
	for threadCPU()-start < d {
		for i := 0; i < 20000; i++ {
			sink = sink*6364136223846793005 + 1
		}
	}
	return threadCPU() - start, running(epoch) - r0
}

//go:noinline
func rest(d time.Duration) time.Duration {
	start := time.Now()
	time.Sleep(d)
	return time.Since(start)
}

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:4317", "OTLP/gRPC endpoint for spans")
	cURL := flag.String("c-url", "", "base URL of the C service (HTTP mode)")
	nextURL := flag.String("next-url", "", "URL of the next service's work (polyglot mode)")
	flag.Parse()
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(*endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		fmt.Fprintln(os.Stderr, "goservice: create exporter:", err)
		os.Exit(1)
	}
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("go-service"))))
	tr := spanprof.NewTracerProvider(sdk).Tracer("goservice")
	var c *cService
	if *cURL != "" {
		c = newCService(*cURL)
	} else if *nextURL != "" {
		c = newCService(*nextURL)
	}
	// One thread, so thread CPU time is the span's CPU time.
	runtime.LockOSThread()
	tid := syscall.Gettid()
	fmt.Printf("ready %d\n", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var cpuMS, sleepMS, cCPUMS, cSleepMS int
		var query string
		var err error
		if *nextURL != "" {
			_, err = fmt.Sscanf(in.Text(), "req %d %d %s", &cpuMS, &sleepMS, &query)
		} else if c != nil {
			_, err = fmt.Sscanf(in.Text(), "req %d %d %d %d", &cpuMS, &sleepMS, &cCPUMS, &cSleepMS)
		} else {
			_, err = fmt.Sscanf(in.Text(), "req %d %d", &cpuMS, &sleepMS)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "goservice: bad request line:", in.Text())
			os.Exit(1)
		}
		// where is the thread and wall-clock bounds of a span's work in
		// polyglot mode, nothing otherwise.
		where := func(t0, t1 time.Time) string {
			if *nextURL == "" {
				return ""
			}
			return fmt.Sprintf(" %d %d %d", tid, t0.UnixNano(), t1.UnixNano())
		}
		rctx, root := tr.Start(ctx, "handle request")
		_, s := tr.Start(rctx, "go cpu")
		t0 := time.Now()
		cpu, run := burn(time.Duration(cpuMS) * time.Millisecond)
		t1 := time.Now()
		s.End()
		fmt.Printf("truth %s go-cpu %d 0 %d%s\n", s.SpanContext().SpanID(), cpu.Nanoseconds(), run.Nanoseconds(), where(t0, t1))
		_, s = tr.Start(rctx, "go sleep")
		t0 = time.Now()
		slept := rest(time.Duration(sleepMS) * time.Millisecond)
		t1 = time.Now()
		s.End()
		fmt.Printf("truth %s go-sleep 0 %d 0%s\n", s.SpanContext().SpanID(), slept.Nanoseconds(), where(t0, t1))
		name := "call c-service"
		if *nextURL != "" {
			name = "call next"
		}
		cctx, s := tr.Start(rctx, name, trace.WithSpanKind(trace.SpanKindClient))
		if c != nil {
			wall0, cpu0 := time.Now(), threadCPU()
			var err error
			if *nextURL != "" {
				err = c.callNext(cctx, query)
			} else {
				err = c.call(cctx, cCPUMS, cSleepMS)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "goservice:", err)
				os.Exit(1)
			}
			cpu := threadCPU() - cpu0
			fmt.Printf("truth %s go-call %d %d 0%s\n", s.SpanContext().SpanID(), cpu.Nanoseconds(), (time.Since(wall0) - cpu).Nanoseconds(),
				where(wall0, time.Now()))
		} else {
			fmt.Printf("call %s %s\n", s.SpanContext().TraceID(), s.SpanContext().SpanID())
			if !in.Scan() || in.Text() != "ok" {
				os.Exit(1)
			}
		}
		s.End()
		root.End()
		if err := sdk.ForceFlush(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "goservice: export spans:", err)
			os.Exit(1)
		}
		fmt.Printf("done %s\n", root.SpanContext().TraceID())
	}
	_ = sdk.Shutdown(ctx)
}
