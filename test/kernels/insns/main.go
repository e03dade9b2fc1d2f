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
	// The tp_btf and the raw-tracepoint sched_switch programs are loaded
	// one at a time, as the sampler does: one sampler for each.
	counts := map[string]uint32{}
	ok := true
	for _, raw := range []bool{false, true} {
		s, err := sampler.New(sampler.Options{Frequency: 99, PIDs: []int{os.Getpid()},
			OffCPU: sampler.OffCPUOptions{Enabled: true, RawTracepoint: raw}})
		if err != nil {
			fmt.Fprintln(os.Stderr, "insns:", err)
			os.Exit(1)
		}
		c, reported, err := s.VerifiedInstructions()
		s.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "insns:", err)
			os.Exit(1)
		}
		ok = ok && reported
		maps.Copy(counts, c)
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
