package sampler

import (
	"math"
	"math/rand/v2"
	"testing"
)

// These mirror offcpu_sampled and offcpu_weighted of bpf/lib/offcpu.h in the
// same integer arithmetic, for the simulation below, which draws millions
// of coins. The helpers themselves are tested in the kernel, with the
// cases these copies once had (bpf/helpertest), and the end-to-end test
// checks the kernel's estimate against ground truth.
func offCPUSampled(u uint32, cycle, t uint64) bool {
	if cycle >= t {
		return true
	}
	return uint64(u)*t < cycle<<32
}

func offCPUWeighted(d, cycle, t uint64) uint64 {
	if cycle >= t {
		return d
	}
	return d/cycle*t + (d%cycle)*t/cycle
}

// waitKind is one class of waits in the synthetic workload: a stack (and
// span) the thread waits in, with its duration distribution.
type waitKind struct {
	name string
	// burst consecutive waits of mean duration mean, each after run ns on
	// CPU.
	burst     int
	mean, run float64
}

// TestOffCPUEstimatorUnbiased simulates one thread that alternates bursts
// of short waits with long ones, samples it exactly as the kernel does
// (cycle = time since the previous blocking switch-out), and checks that
// the weighted total per kind matches the true blocked time while only a
// fraction of the waits is captured.
func TestOffCPUEstimatorUnbiased(t *testing.T) {
	const T = uint64(1_000_000) // 1 ms
	kinds := []waitKind{
		{"pipe ping-pong (25µs)", 200, 25_000, 5_000},
		{"lock handoff (300µs)", 10, 300_000, 20_000},
		{"sleep (5ms)", 1, 5_000_000, 50_000},
	}
	r := rand.New(rand.NewPCG(42, 7))
	truth := make([]float64, len(kinds))
	est := make([]float64, len(kinds))
	var now, lastOut uint64
	waits, captured := 0, 0
	for now < 600e9 { // ten minutes of simulated time
		for k, kind := range kinds {
			for range kind.burst {
				now += uint64(r.ExpFloat64()*kind.run) + 1
				d := uint64(r.ExpFloat64()*kind.mean) + 1
				cycle := T
				if lastOut != 0 {
					cycle = max(now-lastOut, 1)
				}
				lastOut = now
				waits++
				truth[k] += float64(d)
				if offCPUSampled(r.Uint32(), cycle, T) {
					captured++
					est[k] += float64(offCPUWeighted(d, cycle, T))
				}
				now += d
			}
		}
	}
	for k, kind := range kinds {
		rel := est[k]/truth[k] - 1
		t.Logf("%-22s truth %.3fs estimate %.3fs (%+.2f%%)", kind.name, truth[k]/1e9, est[k]/1e9, 100*rel)
		if math.Abs(rel) > 0.02 {
			t.Errorf("%s: estimate off by %.2f%%, want within 2%%", kind.name, 100*rel)
		}
	}
	// Captures are bounded by about elapsed/T (cycles add up to the elapsed
	// time) plus the waits whose cycle alone exceeds T.
	frac := float64(captured) / float64(waits)
	bound := float64(now)/float64(T)*2 + 1
	t.Logf("captured %d of %d waits (%.2f%%), bound %.0f", captured, waits, 100*frac, bound)
	if float64(captured) > bound {
		t.Errorf("captured %d waits, more than the bound %.0f", captured, bound)
	}
	if frac > 0.2 {
		t.Errorf("captured %.1f%% of the waits; sampling should keep a small fraction", 100*frac)
	}
}
