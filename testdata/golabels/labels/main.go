// Command labels is a fixture for reading goroutine labels from outside the
// process: it starts -workers goroutines, each locked to its own thread,
// sets deterministic pprof labels on each, prints one line
// "tid trace_id span_id span_name" per worker and then "ready", and spins on
// the CPU until killed. With -park the workers block on a channel instead:
// each locked thread then sleeps in the scheduler with no goroutine on its
// M (m.curg nil), and only m.lockedg leads to the labels. It uses only the
// standard library so it builds with every Go release the offsets table
// covers (1.21 on).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"
)

var sink uint64

//go:noinline
func spin(n uint64) uint64 {
	x := n
	for i := 0; i < 1000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

func main() {
	workers := flag.Int("workers", 4, "worker goroutines, one thread each")
	extra := flag.Int("extra", 0, "additional labels per worker (tests maps with overflow buckets)")
	park := flag.Bool("park", false, "workers block on a channel instead of spinning")
	flag.Parse()
	runtime.GOMAXPROCS(*workers + 1)

	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func(w int) {
			runtime.LockOSThread()
			args := []string{
				"trace_id", fmt.Sprintf("%032x", 0xabc000+w),
				"span_id", fmt.Sprintf("%016x", 0x5000+w),
				"span_name", fmt.Sprintf("worker%d", w),
			}
			for i := 0; i < *extra; i++ {
				args = append(args, fmt.Sprintf("extra%02d", i), fmt.Sprintf("v%d", i))
			}
			pprof.Do(context.Background(), pprof.Labels(args...), func(context.Context) {
				mu.Lock()
				fmt.Printf("%d %s %s %s\n", syscall.Gettid(), args[1], args[3], args[5])
				mu.Unlock()
				wg.Done()
				if *park {
					select {} // parked for good: the thread waits in stoplockedm
				}
				var x uint64
				for {
					x = spin(x)
					if x == 42 {
						sink = x
					}
				}
			})
		}(w)
	}
	wg.Wait()
	fmt.Println("ready")
	os.Stdout.Sync()
	for {
		// A pending timer: with every worker parked, an empty select
		// here would be reported as a deadlock.
		time.Sleep(time.Hour)
	}
}
