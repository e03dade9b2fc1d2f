package helpertest

import (
	"errors"
	"math"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/spanprof/spanprof/internal/testutil"
)

// load loads the test programs with the off-CPU threshold t, skipping
// without root or on a kernel that cannot run syscall programs.
func load(t *testing.T, threshold uint64) *EstimatorPrograms {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.SkipOnOldKernel(t, 5, 14, "BPF_PROG_TYPE_SYSCALL, which the test programs are")
	_ = rlimit.RemoveMemlock()
	spec, err := LoadEstimator()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Variables[EstimatorVarOffcpuThresholdNs].Set(threshold); err != nil {
		t.Fatal(err)
	}
	// The programs alone: they use no map, so none of the headers' maps
	// is created.
	var objs EstimatorPrograms
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.Skipf("the kernel cannot load the test programs: %v", err)
		}
		t.Fatalf("load the estimator's test programs: %v", err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// TestOffCPUWeighted runs offcpu_weighted (bpf/lib/offcpu.h), d * T / c
// without overflow, in the kernel.
func TestOffCPUWeighted(t *testing.T) {
	tests := []struct {
		name               string
		d, cycle, th, want uint64
	}{
		{"cycle above threshold is exact", 5_000_000, 7_000_000, 1_000_000, 5_000_000},
		{"cycle equal to threshold is exact", 3, 1_000_000, 1_000_000, 3},
		{"q = 1/4", 100_000, 250_000, 1_000_000, 400_000},
		{"q = 1/1e6", 10, 1, 1_000_000, 10_000_000},
		{"remainder kept", 7, 3, 1_000_000, 2_333_333},
		// An hour-long wait after a 1 µs cycle must not overflow.
		{"long wait, tiny cycle", 3_600_000_000_000, 1000, 1_000_000, 3_600_000_000_000_000},
		{"max threshold", 1 << 30, 3, 1<<32 - 1, 357_913_941*(1<<32-1) + (1<<32-1)/3},
	}
	// One load per threshold, kept for the test's subtests.
	objs := map[uint64]*EstimatorPrograms{}
	for _, tt := range tests {
		if objs[tt.th] == nil {
			objs[tt.th] = load(t, tt.th)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := objs[tt.th]
			in := EstimatorWeightedArgs{D: tt.d, Cycle: tt.cycle}
			var out EstimatorWeightedArgs
			if _, err := o.TestWeighted.Run(&ebpf.RunOptions{Context: in, ContextOut: &out}); err != nil {
				t.Fatal(err)
			}
			if out.Got != tt.want {
				t.Errorf("offcpu_weighted(%d, %d) with T %d = %d, want %d", tt.d, tt.cycle, tt.th, out.Got, tt.want)
			}
		})
	}
}

// TestOffCPUCoinProbability checks in the kernel that offcpu_sampled's
// coin lands with probability cycle/T, the q the weight divides by, and
// always from T on.
func TestOffCPUCoinProbability(t *testing.T) {
	const T = uint64(1_000_000)
	o := load(t, T)
	const runs = 100 // of 4096 coins each (COINS)
	for _, cycle := range []uint64{1000, 20_000, 250_000, 999_999, T, 5 * T} {
		var hits, n uint64
		for range runs {
			var out EstimatorSampledArgs
			if _, err := o.TestSampled.Run(&ebpf.RunOptions{Context: EstimatorSampledArgs{Cycle: cycle}, ContextOut: &out}); err != nil {
				t.Fatal(err)
			}
			hits += out.Hits
			n += 4096
		}
		q := min(1, float64(cycle)/float64(T))
		sd := math.Sqrt(q * (1 - q) / float64(n))
		// Five standard deviations, and five coins more: where q is
		// within a few coins of 1 (cycle 999,999: 0.41 misses expected)
		// the count is Poisson, not normal, and four misses (one run in
		// about 1,200) lay beyond 5 sd alone.
		tol := 5*sd + 5/float64(n)
		if got := float64(hits) / float64(n); math.Abs(got-q) > tol {
			t.Errorf("cycle %d: coin landed %.6f of the time, want %.6f ± %.6f", cycle, got, q, tol)
		}
	}
}
