// Command service is a Go workload for goroutine-label correlation: workers
// run spans of 20-60 ms through the spanprof SDK, each in its own function
// and busy on the CPU, and record the ground truth of every span, one line
// per goroutine that worked in it:
//
//	goid tid trace_id span_id start_ns end_ns function held_ns released_ns unlocked_ns
//
// (CLOCK_REALTIME). Two windows, because the goroutine can be preempted
// between any two of these steps, for many milliseconds on a loaded
// machine. start..end encloses the time the goroutine carries the span's
// labels: start is taken before Tracer.Start (for a child goroutine, before
// the go statement: it inherits the labels when created), end after
// Span.End (after a child dropped its labels). held..released lies inside
// it: held is taken after the labels are set, released before they are
// dropped. Workers are locked to their threads (-lock), so the tid of a
// line is the thread every sample of that goroutine's span work was taken
// on (a child is locked before it takes held). With -spawn, half of each
// span's work runs in a child goroutine started inside the span (it
// inherits the labels; it records its own line). Until the child has
// locked its thread it may run on any of the process's threads (a new
// goroutine can be preempted before its first statement and resumed by
// another M): its line's unlocked_ns, taken after LockOSThread, ends that
// time; samples of its span between start_ns and unlocked_ns belong to it
// on whatever thread they were taken. unlocked_ns is 0 for a goroutine
// locked before its span started, and end_ns without -lock.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"time"

	spanprof "github.com/spanprof/spanprof/sdk/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

var sink uint64

// burn keeps the CPU busy until deadline.
//
//go:noinline
func burn(deadline time.Time) {
	x := uint64(time.Now().UnixNano())
	for time.Now().Before(deadline) {
		for i := 0; i < 2000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 42 {
		sink = x
	}
}

// Distinct span functions, so samples of each span have a distinct leaf
// frame under the worker.

//go:noinline
func handleCheckout(d time.Time) { burn(d) }

//go:noinline
func handleSearch(d time.Time) { burn(d) }

//go:noinline
func handleLogin(d time.Time) { burn(d) }

//go:noinline
func renderPage(d time.Time) { burn(d) }

//go:noinline
func childWork(d time.Time) { burn(d) }

var spanFuncs = []struct {
	name string
	fn   func(time.Time)
}{
	{"handleCheckout", handleCheckout},
	{"handleSearch", handleSearch},
	{"handleLogin", handleLogin},
	{"renderPage", renderPage},
}

// truth serializes ground-truth lines to the output file.
type truth struct {
	mu   sync.Mutex
	w    *bufio.Writer
	lock bool // workers lock their threads (-lock)
}

// record writes one line: the outer window start..end, the inner window
// held..released, and until when the goroutine was on no thread of its own
// (locked: when it locked its thread, zero time for before the span;
// without -lock, end; see the package comment).
func (t *truth) record(sc trace.SpanContext, fn string, start, end, held, released, locked time.Time) {
	u := int64(0)
	if !t.lock {
		u = end.UnixNano()
	} else if !locked.IsZero() {
		u = locked.UnixNano()
	}
	line := fmt.Sprintf("%d %d %s %s %d %d %s %d %d %d\n", goid(), syscall.Gettid(),
		sc.TraceID(), sc.SpanID(), start.UnixNano(), end.UnixNano(), fn, held.UnixNano(), released.UnixNano(), u)
	t.mu.Lock()
	t.w.WriteString(line)
	t.mu.Unlock()
}

// goid parses the current goroutine's id from its stack header.
func goid() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseInt(string(b), 10, 64)
	return id
}

func worker(ctx context.Context, tr trace.Tracer, gt *truth, seed int64, lock, spawn bool, stop <-chan struct{}) {
	if lock {
		runtime.LockOSThread()
	}
	rnd := rand.New(rand.NewSource(seed))
	for {
		select {
		case <-stop:
			return
		default:
		}
		f := spanFuncs[rnd.Intn(len(spanFuncs))]
		d := time.Duration(20+rnd.Intn(41)) * time.Millisecond
		start := time.Now()
		sctx, span := tr.Start(ctx, f.name)
		held := time.Now()
		end := start.Add(d)
		var wg sync.WaitGroup
		if spawn {
			// The child works during the first half of the span.
			wg.Add(1)
			spawned := time.Now()
			go func() {
				if lock {
					runtime.LockOSThread() // the thread exits with the goroutine
				}
				cs := time.Now()
				childWork(cs.Add(d / 2))
				released := time.Now()
				// Drop the inherited labels before taking the end time:
				// recording may wait for the file lock.
				pprof.SetGoroutineLabels(context.Background())
				sc := trace.SpanContextFromContext(sctx)
				gt.record(sc, "childWork", spawned, time.Now(), cs, released, cs)
				wg.Done()
			}()
		}
		f.fn(end)
		wg.Wait()
		released := time.Now()
		span.End()
		sc := span.SpanContext()
		gt.record(sc, f.name, start, time.Now(), held, released, time.Time{})
	}
}

func main() {
	workers := flag.Int("workers", 4, "worker goroutines")
	duration := flag.Duration("duration", 10*time.Second, "run time (0: until SIGTERM or SIGINT, which also end a run early)")
	out := flag.String("out", "groundtruth.txt", "ground truth file")
	lock := flag.Bool("lock", true, "lock each worker goroutine to its thread")
	spawn := flag.Bool("spawn", true, "start a child goroutine inside each span")
	procs := flag.Int("gomaxprocs", 0, "GOMAXPROCS (0: max(2, NumCPU))")
	flag.Parse()
	if *procs <= 0 {
		*procs = max(2, runtime.NumCPU())
	}
	runtime.GOMAXPROCS(*procs)

	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "create ground truth:", err)
		os.Exit(1)
	}
	gt := &truth{w: bufio.NewWriter(f), lock: *lock}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	tr := spanprof.NewTracerProvider(tp).Tracer("golabels-service")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			worker(context.Background(), tr, gt, int64(i)+1, *lock, *spawn, stop)
		}(i)
	}
	fmt.Println("ready", os.Getpid())
	// A signal ends the run as its time would: the ground truth is written
	// either way, so a caller can stop it as soon as it has what it needs.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var timeUp <-chan time.Time
	if *duration > 0 {
		timeUp = time.After(*duration)
	}
	select {
	case <-timeUp:
	case <-sigs:
	}
	close(stop)
	wg.Wait()
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
}
