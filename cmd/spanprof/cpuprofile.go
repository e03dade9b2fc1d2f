package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a Go CPU profile of spanprof itself to the file
// named by SPANPROF_CPUPROFILE, when set, until the returned stop runs
// (`go tool pprof -top bin/spanprof FILE`). It exists for benchmarks of
// the agent's own cost (BENCHMARKS.md); failures only warn, since the
// profile is never what the user asked for. Call it first in run:
//
//	defer startCPUProfile(stderr)()
func startCPUProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv("SPANPROF_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "spanprof: SPANPROF_CPUPROFILE: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "spanprof: SPANPROF_CPUPROFILE: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "spanprof: SPANPROF_CPUPROFILE: %v\n", err)
		}
	}
}

// startHeapProfile writes a Go heap profile of spanprof itself to the file
// named by SPANPROF_MEMPROFILE when the returned stop runs: live objects
// (inuse_space) as of the last garbage collection, which ran while the
// agent was still working (forcing one here would show the heap after
// shutdown released it), and everything allocated since start
// (alloc_space), for the agent's memory bar (BENCHMARKS.md). Failures
// only warn.
func startHeapProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv("SPANPROF_MEMPROFILE")
	if path == "" {
		return func() {}
	}
	return func() {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintf(stderr, "spanprof: SPANPROF_MEMPROFILE: %v\n", err)
			return
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			fmt.Fprintf(stderr, "spanprof: SPANPROF_MEMPROFILE: %v\n", err)
		}
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "spanprof: SPANPROF_MEMPROFILE: %v\n", err)
		}
	}
}
