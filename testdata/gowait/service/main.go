// Command service is a Go workload for off-CPU sampling of parked
// goroutines: workers run spans through the spanprof SDK that each wait
// once, for a random 10-70 ms, in one of three ways that park the
// goroutine without blocking a thread: time.Sleep, a channel receive, and
// a contended sync.Mutex. The helpers that end the waits run outside any
// span. Every span writes one line of ground truth:
//
//	trace_id span_id kind waited_ns function
//
// where waited_ns is measured around the blocking call and function is
// the span's own function, which must appear on the sampled stack.
// With -idle N it also parks N goroutines forever (unlabeled), to measure
// the sampler's cost per goroutine. It prints "ready PID", then waits for
// a line on stdin when -wait is set, so spans start once a profiler runs.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"time"

	spanprof "github.com/spanprof/spanprof/sdk/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// waitRequest asks a helper to end a wait after d.
type waitRequest struct {
	d    time.Duration
	done chan struct{}
}

// sleepSpan waits in time.Sleep (wait reason "sleep").
//
//go:noinline
func sleepSpan(d time.Duration) time.Duration {
	start := time.Now()
	time.Sleep(d)
	return time.Since(start)
}

// chanSpan waits for a helper's close (wait reason "chan receive").
//
//go:noinline
func chanSpan(helper chan<- waitRequest, d time.Duration) time.Duration {
	done := make(chan struct{})
	helper <- waitRequest{d, done}
	start := time.Now()
	<-done
	return time.Since(start)
}

// mutexSpan waits for a mutex a helper holds (wait reason
// "sync.Mutex.Lock").
//
//go:noinline
func mutexSpan(mu *sync.Mutex) time.Duration {
	start := time.Now()
	mu.Lock()
	waited := time.Since(start)
	mu.Unlock()
	return waited
}

// closer ends channel waits: it sleeps, then closes.
func closer(reqs <-chan waitRequest) {
	for r := range reqs {
		time.Sleep(r.d)
		close(r.done)
	}
}

// holder locks mu, says so, holds it for d, and unlocks.
func holder(mu *sync.Mutex, reqs <-chan waitRequest) {
	for r := range reqs {
		mu.Lock()
		close(r.done)
		time.Sleep(r.d)
		mu.Unlock()
	}
}

type truth struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (t *truth) record(sc trace.SpanContext, kind string, waited time.Duration, fn string) {
	t.mu.Lock()
	fmt.Fprintf(t.w, "%s %s %s %d %s\n", sc.TraceID(), sc.SpanID(), kind, waited.Nanoseconds(), fn)
	t.mu.Unlock()
}

func worker(tr trace.Tracer, gt *truth, seed int64, deadline time.Time) {
	rnd := rand.New(rand.NewSource(seed))
	chanReqs, holdReqs := make(chan waitRequest, 1), make(chan waitRequest)
	var mu sync.Mutex
	go closer(chanReqs)
	go holder(&mu, holdReqs)
	defer close(chanReqs)
	defer close(holdReqs)
	for time.Now().Before(deadline) {
		d := time.Duration(10+rnd.Intn(61)) * time.Millisecond
		kind := []string{"sleep", "chan", "mutex"}[rnd.Intn(3)]
		if kind == "mutex" {
			// The holder takes the lock before the span starts.
			locked := make(chan struct{})
			holdReqs <- waitRequest{d, locked}
			<-locked
		}
		_, span := tr.Start(context.Background(), kind)
		var waited time.Duration
		var fn string
		switch kind {
		case "sleep":
			waited, fn = sleepSpan(d), "main.sleepSpan"
		case "chan":
			waited, fn = chanSpan(chanReqs, d), "main.chanSpan"
		case "mutex":
			waited, fn = mutexSpan(&mu), "main.mutexSpan"
		}
		span.End()
		gt.record(span.SpanContext(), kind, waited, fn)
	}
}

func main() {
	workers := flag.Int("workers", 6, "worker goroutines")
	duration := flag.Duration("duration", 6*time.Second, "how long workers run spans")
	out := flag.String("out", "groundtruth.txt", "ground truth file")
	idle := flag.Int("idle", 0, "goroutines parked forever outside any span")
	wait := flag.Bool("wait", false, "start spans after a line on stdin")
	spin := flag.Bool("spin", false, "also keep one goroutine busy and print \"spins N\" (loop iterations) at the end, to measure slowdown")
	flag.Parse()

	never := make(chan struct{})
	for i := 0; i < *idle; i++ {
		go func() { <-never }()
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create ground truth:", err)
		os.Exit(1)
	}
	gt := &truth{w: bufio.NewWriter(f)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	tr := spanprof.NewTracerProvider(tp).Tracer("gowait-service")
	fmt.Println("ready", os.Getpid())
	if *wait {
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	deadline := time.Now().Add(*duration)
	var spins atomic.Uint64
	if *spin {
		go func() {
			x := uint64(1)
			for n := uint64(1); ; n++ {
				for i := 0; i < 1000; i++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
				spins.Store(n)
				if x == 42 {
					fmt.Print("")
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			worker(tr, gt, int64(i)+1, deadline)
		}(i)
	}
	wg.Wait()
	if *workers == 0 {
		time.Sleep(*duration)
	}
	gt.mu.Lock()
	err = gt.w.Flush()
	gt.mu.Unlock()
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "write ground truth:", err)
		os.Exit(1)
	}
	_ = tp.Shutdown(context.Background())
	if *spin {
		fmt.Println("spins", spins.Load())
	}
	close(never)
}
