package collect

import (
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/unwind"
)

// TestSizeWindow follows one process's window: unsized while its samples
// span less than the probe, then sized to twice the most a walk needed,
// widened at once for a cut, and forgotten at exec.
func TestSizeWindow(t *testing.T) {
	type set struct{ pid, bytes uint32 }
	var sets []set
	c := New(Options{NoLeafRecovery: true, NoVDSO: true, WindowProbe: time.Second,
		StackWindow: func(pid, bytes uint32) error { sets = append(sets, set{pid, bytes}); return nil }})
	t0 := time.Unix(1000, 0)
	walk := func(at time.Duration, needed uint64, stop unwind.Stop) {
		c.sizeWindow(7, t0.Add(at), unwind.Result{Stop: stop, Needed: needed})
	}
	walk(0, 0, unwind.StopOutermost)
	walk(300*time.Millisecond, 1500, unwind.StopOutermost) // a vfprintf frame, in the wide first window
	walk(900*time.Millisecond, 200, unwind.StopOutermost)
	if len(sets) != 0 {
		t.Fatalf("window set before the probe ended: %v", sets)
	}
	walk(time.Second, 100, unwind.StopOutermost)
	if want := []set{{7, 4096}}; len(sets) != 1 || sets[0] != want[0] {
		t.Fatalf("after the probe: sets %v, want %v (twice 1500 bytes, rounded up)", sets, want)
	}
	walk(2*time.Second, 3000, unwind.StopOutermost) // fits: nothing to do
	walk(3*time.Second, 5000, unwind.StopWindow)    // cut: widen now
	walk(4*time.Second, 9000, unwind.StopWindow)    // beyond the widest: stays at it
	if want := []set{{7, 4096}, {7, sampler.WindowMax}}; len(sets) != 2 || sets[1] != want[1] {
		t.Fatalf("after the cuts: sets %v, want %v", sets, want)
	}
	st := c.Stats()
	if st.WindowsSized != 1 || st.WindowsWidened != 1 {
		t.Errorf("stats: %d sized, %d widened, want 1 and 1", st.WindowsSized, st.WindowsWidened)
	}

	// An exec's new image is sized from its own stacks.
	c.ProcEvent(sampler.ProcEvent{PID: 7, Time: t0.Add(5 * time.Second)})
	if last := sets[len(sets)-1]; last != (set{7, 0}) {
		t.Fatalf("exec: last set %v, want the window forgotten", last)
	}
	n := len(sets)
	walk(5*time.Second, 0, unwind.StopOutermost)
	walk(6*time.Second, 0, unwind.StopOutermost)
	if len(sets) != n+1 || sets[n] != (set{7, 1024}) {
		t.Fatalf("after the exec: sets %v, want the smallest window (1024) once the probe ended", sets[n:])
	}
}
