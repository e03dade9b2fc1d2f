package gowait

import (
	"bufio"
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTargetSlowdown measures what sampling costs the target: the
// fixture keeps one goroutine busy next to 10,000 parked ones for 3 s and
// counts its loop iterations, alternately without and with the sampler
// at 19 Hz. It reports the ratio of iterations with to without (1.0: no
// slowdown); on a shared machine the noise of one pair is several
// percent, so read it over rounds (-benchtime Nx). The sampler never stops
// the target: the only costs are its reads' cache and memory-bandwidth
// use and the CPU it takes from a busy machine.
func BenchmarkTargetSlowdown(b *testing.B) {
	requirePtrace(b)
	var off, on float64
	for i := 0; i < b.N; i++ {
		// Alternate which goes first, so drifts of the machine's load
		// fall on both.
		if i%2 == 0 {
			off += spinRun(b, false)
			on += spinRun(b, true)
		} else {
			on += spinRun(b, true)
			off += spinRun(b, false)
		}
	}
	b.ReportMetric(on/off, "spins-with/without")
	b.ReportMetric(off/float64(b.N), "spins-without")
	b.ReportMetric(on/float64(b.N), "spins-with")
}

// spinRun runs the fixture once and returns its loop iterations.
func spinRun(b *testing.B, sample bool) float64 {
	cmd := exec.Command(serviceFixture(b), "-workers", "0", "-idle", "10000", "-spin", "-duration", "3s", "-out", b.TempDir()+"/truth")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "ready ") {
		b.Fatalf("fixture first line %q", sc.Text())
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if sample {
		s := New(Options{})
		if err := s.Add(uint32(cmd.Process.Pid)); err != nil {
			b.Fatal(err)
		}
		go s.Run(ctx)
	}
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "spins "); ok {
			v, err := strconv.ParseFloat(n, 64)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
	}
	b.Fatal("fixture printed no spin count")
	return 0
}
