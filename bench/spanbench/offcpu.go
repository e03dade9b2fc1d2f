package main

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// offcpuRun is one run of bench/offcpu.sh: eBPF ns per context switch of
// spanprof and offcputime attached to the same switches at once.
type offcpuRun struct {
	spanprof, offcputime float64
	out                  string
}

func (b *bench) runOffCPU() {
	for r := range b.rounds {
		b.logf("bench/offcpu.sh round %d/%d", r+1, b.rounds)
		cmd := exec.Command("bench/offcpu.sh")
		cmd.Env = append(os.Environ(), "DURATION=10")
		o, err := cmd.CombinedOutput()
		run := offcpuRun{out: string(o)}
		if err != nil {
			run.out += "\n(failed: " + err.Error() + ")\n"
		}
		for _, line := range strings.Split(run.out, "\n") {
			f := strings.Fields(line)
			if len(f) != 4 {
				continue
			}
			v, err := strconv.ParseFloat(f[3], 64)
			if err != nil {
				continue
			}
			switch f[0] {
			case "spanprof":
				run.spanprof = v
			case "offcputime":
				run.offcputime = v
			}
		}
		b.offcpu = append(b.offcpu, run)
	}
}
