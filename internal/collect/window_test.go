package collect

import (
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
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
		c.sizeWindow(nil, 7, t0.Add(at), unwind.Result{Stop: stop, Needed: needed}, 0)
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

// TestExeWindow follows one executable's windows, for samples in its own
// code and elsewhere: a process gone before its probe ended gives the file
// what its stacks needed for each kind, a sized one the same, a cut widens
// the cut kind, and the file keeps the most of them.
func TestExeWindow(t *testing.T) {
	type set struct {
		dev          uint32
		ino          uint64
		inExe, other uint32
	}
	var sets []set
	c := New(Options{NoLeafRecovery: true, NoVDSO: true, WindowProbe: time.Second,
		StackWindow: func(pid, bytes uint32) error { return nil },
		ExeWindow: func(dev uint32, ino uint64, inExe, other uint32) error {
			sets = append(sets, set{dev, ino, inExe, other})
			return nil
		}})
	cc := &proc.Process{Exe: "/usr/bin/cc", Mappings: []proc.Mapping{
		{Start: 0x1000, End: 0x2000, Path: "/lib64/ld-linux-x86-64.so.2", Dev: "08:01", Inode: 9},
		{Start: 0x4000, End: 0x5000, Path: "/usr/bin/cc", Dev: "fd:02", Inode: 42},
	}}
	const loaderIP, exeIP = 0x1100, 0x4100
	want := func(inExe, other uint32) set { return set{0xfd<<20 | 2, 42, inExe, other} }
	t0 := time.Unix(1000, 0)
	walk := func(pid uint32, at time.Duration, ip, needed uint64, stop unwind.Stop) {
		c.sizeWindow(cc, pid, t0.Add(at), unwind.Result{Stop: stop, Needed: needed}, ip)
	}

	// Short-lived: its loader's frames need 3000 bytes, its own code
	// none; it exits within its probe.
	walk(10, 0, loaderIP, 3000, unwind.StopOutermost)
	walk(10, 50*time.Millisecond, exeIP, 0, unwind.StopOutermost)
	walk(10, 100*time.Millisecond, exeIP, 600, unwind.StopOutermost)
	if len(sets) != 0 {
		t.Fatalf("set before the process ended: %v", sets)
	}
	c.ProcEvent(sampler.ProcEvent{PID: 10, Exit: true, Time: t0.Add(200 * time.Millisecond)})
	if len(sets) != 1 || sets[0] != want(2048, 8192) {
		t.Fatalf("after a short process: sets %v, want %v (twice 600 and 3000 bytes, rounded up)", sets, want(2048, 8192))
	}

	// Another needing less changes nothing; a cut in the executable's
	// code widens that kind.
	walk(11, 0, exeIP, 100, unwind.StopOutermost)
	c.ProcEvent(sampler.ProcEvent{PID: 11, Exit: true, Time: t0.Add(300 * time.Millisecond)})
	if len(sets) != 1 {
		t.Fatalf("a process needing less: sets %v", sets)
	}
	walk(12, 0, exeIP, 1500, unwind.StopWindow)
	if len(sets) != 2 || sets[1] != want(4096, 8192) {
		t.Fatalf("after a cut: sets %v, want %v last", sets, want(4096, 8192))
	}

	// A process that only ran its own code teaches the first chunk's
	// window to a file not seen yet, and leaves the other kind unlearned.
	other := &proc.Process{Exe: "/usr/bin/true", Mappings: []proc.Mapping{
		{Start: 0x4000, End: 0x5000, Path: "/usr/bin/true", Dev: "fd:02", Inode: 43},
	}}
	c.sizeWindow(other, 14, t0, unwind.Result{Stop: unwind.StopOutermost}, exeIP)
	c.ProcEvent(sampler.ProcEvent{PID: 14, Exit: true, Time: t0})
	if len(sets) != 3 || sets[2] != (set{0xfd<<20 | 2, 43, 1024, 0}) {
		t.Fatalf("a process of its own code only: sets %v, want {.. 43 1024 0} last", sets)
	}

	// A process of no known executable teaches nothing.
	c.sizeWindow(&proc.Process{Exe: "/gone"}, 13, t0, unwind.Result{Stop: unwind.StopWindow, Needed: 100}, exeIP)
	c.ProcEvent(sampler.ProcEvent{PID: 13, Exit: true, Time: t0})
	if len(sets) != 3 {
		t.Fatalf("unknown executable: sets %v", sets)
	}
}
