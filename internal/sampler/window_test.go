package sampler

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestExeWindow checks the window the kernel copies for a process with no
// window of its own: new_process_window until its executable has one
// (SetExeWindow), then the executable's, until the process has its own
// (SetStackWindow).
func TestExeWindow(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	var st unix.Stat_t
	if err := unix.Stat(fmt.Sprintf("/proc/%d/exe", pid), &st); err != nil {
		t.Fatal(err)
	}
	dev := unix.Major(st.Dev)<<20 | unix.Minor(st.Dev)

	s := startSampler(t, Options{Frequency: 999, PIDs: []int{pid}, NewProcessWindow: WindowMax})
	// window returns the most window bytes of pid's samples over d.
	window := func(d time.Duration) (most, n int) {
		// Samples wait in the ring for up to pollInterval: skip those
		// taken before the change.
		since := time.Now().Add(pollInterval)
		deadline := time.After(d + pollInterval)
		for {
			select {
			case e := <-s.Events():
				if e.Sample != nil && e.Sample.PID == uint32(pid) && e.Sample.Time.After(since) {
					most, n = max(most, len(e.Sample.StackTop)), n+1
				}
			case <-deadline:
				return most, n
			}
		}
	}
	before, n0 := window(500 * time.Millisecond)
	if err := s.SetExeWindow(dev, st.Ino, 2048); err != nil {
		t.Fatal(err)
	}
	exe, n1 := window(500 * time.Millisecond)
	if err := s.SetStackWindow(uint32(pid), 4096); err != nil {
		t.Fatal(err)
	}
	own, n2 := window(500 * time.Millisecond)
	t.Logf("window bytes: new process %d (%d samples), executable's %d (%d), own %d (%d)", before, n0, exe, n1, own, n2)
	if n0 == 0 || n1 == 0 || n2 == 0 {
		t.Skipf("the child got no CPU in a window (%d, %d, %d samples): the machine is too busy to judge", n0, n1, n2)
	}
	if before <= 2048 {
		t.Fatalf("new process: windows of at most %d bytes, want more than 2048 (NewProcessWindow %d)", before, WindowMax)
	}
	if exe != 2048 {
		t.Fatalf("with the executable's window of 2048 bytes: windows of up to %d bytes", exe)
	}
	if own <= 2048 || own > 4096 {
		t.Fatalf("with the process's own window of 4096 bytes: windows of up to %d bytes", own)
	}
}
