package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// TestWindowStopsAtStackTop: a main thread whose stack ends within its
// window (a shell's, a few KiB under its environment strings) gets the
// window up to its environment's end (mm->env_end), read at once, rather
// than a read past the stack's end that faults and is retried page by
// page, which ended the window at a page boundary.
func TestWindowStopsAtStackTop(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	envEnd := statField(t, pid, 51) // env_end, proc(5)
	s := startSampler(t, Options{Frequency: 999, PIDs: []int{pid}, NewProcessWindow: WindowMax})
	deadline := time.After(time.Second)
	var n, atTop int
	for n < 200 {
		select {
		case e := <-s.Events():
			r := e.Sample
			if r == nil || r.PID != uint32(pid) || r.UserSP == 0 || envEnd-r.UserSP >= WindowMax || len(r.StackTop) <= 1024 {
				continue
			}
			n++
			end := r.UserSP + uint64(len(r.StackTop))
			if end > envEnd {
				t.Fatalf("window [%#x, %#x) past the environment's end %#x: read up to the stack's end after reads that faulted", r.UserSP, end, envEnd)
			}
			if envEnd-end < 8 {
				atTop++
			}
		case <-deadline:
			if n == 0 {
				t.Skip("the child got no CPU in a second: the machine is too busy to judge")
			}
			n = 200
		}
	}
	t.Logf("%d of %d windows end at the environment's end %#x", atTop, n, envEnd)
	if atTop != n {
		t.Fatalf("%d of %d windows of a shallow main thread end at its environment's end, want all", atTop, n)
	}
}

// statField is field i (1-based) of /proc/PID/stat, as a number.
func statField(t *testing.T, pid, i int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	v, err := strconv.ParseUint(fields[i-3], 10, 64)
	if err != nil {
		t.Fatalf("stat field %d: %v", i, err)
	}
	return v
}
