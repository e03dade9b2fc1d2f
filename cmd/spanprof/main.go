// Command spanprof is a continuous profiler that ties on-CPU and off-CPU
// stacks to the trace spans they ran in.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spanprof/spanprof/internal/check"
)

const usage = `usage: spanprof <command> [flags]

commands:
  record   profile for a fixed time and write a file
  agent    run continuously and export OTLP to a collector
  check    verify frame pointers, build IDs and context publishing
  serve    local web UI for profile files

Run 'spanprof <command> -h' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer startCPUProfile(stderr)()  // SPANPROF_CPUPROFILE=FILE profiles spanprof itself
	defer startHeapProfile(stderr)() // SPANPROF_MEMPROFILE=FILE, its heap at the end
	switch args[0] {
	case "record":
		return runRecord(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "agent":
		return runAgent(ctx, args[1:], stderr)
	case "check":
		return check.Main(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "spanprof: unknown command %q\n%s", args[0], usage)
		return 1
	}
}
