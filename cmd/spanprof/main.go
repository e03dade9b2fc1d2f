// Command spanprof is a continuous profiler that ties on-CPU and off-CPU
// stacks to the trace spans they ran in.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/spanprof/spanprof/internal/check"
	"github.com/spanprof/spanprof/internal/cli"
)

var commands = []string{"record", "agent", "check", "serve", "version", "help"}

const usage = `usage: spanprof <command> [flags]

commands:
  record   profile for a fixed time and write a file
  agent    run continuously and export OTLP to a collector
  check    verify frame pointers, build IDs and context publishing
  serve    local web UI for profile files
  version  print the version and build of this binary

Run 'spanprof help <command>' for the flags of a command.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 1
	}
	if args[0] == gateCommand {
		return runGate(args[1:], stderr)
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
		return runAgent(ctx, args[1:], stdout, stderr)
	case "check":
		return check.Main(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, cli.Info())
		return 0
	case "help", "-h", "--help":
		// "help record" is "record -h".
		if len(args) > 1 && args[0] == "help" && args[1] != "help" && slices.Contains(commands, args[1]) {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		if len(args) > 1 && args[0] == "help" {
			fmt.Fprintf(stderr, "spanprof help: unknown command %q%s\n", args[1], didYouMean(args[1]))
			return 1
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "spanprof: unknown command %q%s\nRun 'spanprof help' for the commands.\n", args[0], didYouMean(args[0]))
		return 1
	}
}

// exitCode is the exit code of a command that ended with err: 0 for none
// or help asked for, else 1 with the error on one line of stderr.
func exitCode(command string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintf(stderr, "spanprof %s: %v\n", command, err)
	return 1
}

func didYouMean(word string) string {
	if s := cli.Suggest(word, commands); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}
