// Command insns loads the sampler's programs, off-CPU sampling on (each
// sched_switch variant in a sampler of its own), and
// prints how many instructions the verifier processed for each, as one
// line "insns reported=1 NAME=N ...", for the kernel-matrix test
// (test/kernels), which holds them to bpf/verified-insns.txt on every
// kernel it boots. reported=0: the kernel does not say (before 5.16).
package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spanprof/spanprof/internal/sampler"
)

func main() {
	counts, ok, err := sampler.MeasureVerifiedInstructions(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, "insns:", err)
		os.Exit(1)
	}
	line := []string{"insns", "reported=0"}
	if ok {
		line[1] = "reported=1"
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		line = append(line, fmt.Sprintf("%s=%d", name, counts[name]))
	}
	fmt.Println(strings.Join(line, " "))
}
