package sampler

import (
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/spanprof/spanprof/internal/clock"
	"github.com/spanprof/spanprof/internal/testutil"
)

// TestWallTimeFromTAI checks that on-CPU and off-CPU samples take their
// wall-clock time from the CLOCK_TAI the kernel read with them, not from
// the monotonic stamp and an offset measured earlier: the converter here
// is given a monotonic clock an hour ahead, so that converting ktime_ns
// would put every sample an hour early (as a wall clock stepped an hour
// forward after the offset was measured would), while the TAI stamp must
// still land inside the run.
func TestWallTimeFromTAI(t *testing.T) {
	testutil.RequireRoot(t)
	if err := features.HaveProgramHelper(ebpf.PerfEvent, asm.FnKtimeGetTaiNs); errors.Is(err, ebpf.ErrNotSupported) {
		t.Skip("kernel without bpf_ktime_get_tai_ns (Linux 6.1)")
	}
	src := clock.System
	src.Monotonic = func() int64 { return clock.System.Monotonic() + int64(time.Hour) }
	conv := clock.NewConverterFrom(src)

	// A shell that spins and waits in turn: on-CPU samples and off-CPU
	// waits (for its sleep children).
	cmd := exec.Command("sh", "-c", "while :; do i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; sleep 0.02; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	before := time.Now()
	s := startSampler(t, Options{Frequency: 199, PIDs: []int{cmd.Process.Pid}, Clock: conv,
		OffCPU: OffCPUOptions{Enabled: true, Threshold: time.Nanosecond}})
	time.Sleep(600 * time.Millisecond)
	s.Stop()
	after := time.Now()

	n := map[Kind]int{}
	for _, r := range drain(s) {
		n[r.Kind]++
		if !r.TAI {
			t.Fatalf("%v sample of tid %d without a CLOCK_TAI stamp on a kernel with the helper", r.Kind, r.TID)
		}
		if r.Time.Before(before) || r.Time.After(after) {
			t.Fatalf("%v sample at %v, outside the run [%v, %v]; ktime converted: %v",
				r.Kind, r.Time, before, after, conv.Time(r.KTime))
		}
	}
	t.Logf("samples inside the run: %d on-CPU, %d off-CPU", n[OnCPU], n[OffCPU])
	if n[OnCPU] < 10 || n[OffCPU] < 1 {
		t.Fatalf("%d on-CPU samples and %d off-CPU waits, want ≥ 10 and ≥ 1", n[OnCPU], n[OffCPU])
	}
}
