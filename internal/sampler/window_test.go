package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestExeWindow checks the window the kernel copies for a process with no
// window of its own: new_process_window until its executable has one
// (SetExeWindow), then the executable's for the kind of the sample's ip
// (in the executable's code or elsewhere), until the process has its own
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
	text := exeText(t, pid)
	// window returns the most window bytes of pid's samples over d, and
	// of those with their ip in the executable's code and elsewhere.
	var inExe, other int
	window := func(d time.Duration) (most, n int) {
		inExe, other = 0, 0
		// Samples wait in the ring for up to pollInterval: skip those
		// taken before the change.
		since := time.Now().Add(pollInterval)
		deadline := time.After(d + pollInterval)
		for {
			select {
			case e := <-s.Events():
				if e.Sample != nil && e.Sample.PID == uint32(pid) && e.Sample.Time.After(since) {
					most, n = max(most, len(e.Sample.StackTop)), n+1
					if ip := e.Sample.UserIP; ip >= text[0] && ip < text[1] {
						inExe = max(inExe, len(e.Sample.StackTop))
					} else {
						other = max(other, len(e.Sample.StackTop))
					}
				}
			case <-deadline:
				return most, n
			}
		}
	}
	before, n0 := window(500 * time.Millisecond)
	if err := s.SetExeWindow(dev, st.Ino, 2048, 2048); err != nil {
		t.Fatal(err)
	}
	exe, n1 := window(500 * time.Millisecond)
	// The kinds apart: the first chunk alone in the shell's own code.
	if err := s.SetExeWindow(dev, st.Ino, 1024, 4096); err != nil {
		t.Fatal(err)
	}
	_, nk := window(500 * time.Millisecond)
	kindIn, kindOther := inExe, other
	if err := s.SetStackWindow(uint32(pid), 4096); err != nil {
		t.Fatal(err)
	}
	own, n2 := window(500 * time.Millisecond)
	t.Logf("window bytes: new process %d (%d samples), executable's %d (%d), by kind %d in its code and %d elsewhere (%d), own %d (%d)",
		before, n0, exe, n1, kindIn, kindOther, nk, own, n2)
	if n0 == 0 || n1 == 0 || n2 == 0 {
		t.Skipf("the child got no CPU in a window (%d, %d, %d samples): the machine is too busy to judge", n0, n1, n2)
	}
	if before <= 2048 {
		t.Fatalf("new process: windows of at most %d bytes, want more than 2048 (NewProcessWindow %d)", before, WindowMax)
	}
	if exe != 2048 {
		t.Fatalf("with the executable's window of 2048 bytes: windows of up to %d bytes", exe)
	}
	if nk > 0 && (kindIn == 0 || kindIn > 1024 || kindOther > 4096) {
		t.Fatalf("with the executable's windows of 1024 bytes in its code and 4096 elsewhere: up to %d and %d bytes", kindIn, kindOther)
	}
	if own <= 2048 || own > 4096 {
		t.Fatalf("with the process's own window of 4096 bytes: windows of up to %d bytes", own)
	}
}

// TestWindowStopsAtStackTop: a main thread whose stack ends within its
// window (dd's, a few KiB under its environment strings) gets the
// window up to its environment's end (mm->env_end), read at once, rather
// than a read past the stack's end that faults and is retried page by
// page, which ended the window at a page boundary.
func TestWindowStopsAtStackTop(t *testing.T) {
	testutil.RequireRoot(t)
	// dd's main thread runs a few small frames deep (a shell's frames
	// hold large buffers, pages of which are never touched), and an
	// environment of its own keeps the stack, from those frames to the
	// strings' end, a few KiB whatever the test's.
	cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	for range 100 { // its env_end is the new image's once it exec'd
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "dd" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	envEnd := statField(t, pid, 51) // env_end, proc(5)
	s := startSampler(t, Options{Frequency: 999, PIDs: []int{pid}, NewProcessWindow: WindowMax})
	deadline := time.After(time.Second)
	var n, atTop int
	// Up to 200 windows, or those of a second on a busy machine.
wait:
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
			break wait
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

// exeText is the executable's code mapping of pid, as the kernel's
// mm->start_code to end_code span it.
func exeText(t *testing.T, pid int) [2]uint64 {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[5] != exe || !strings.Contains(f[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		a, err1 := strconv.ParseUint(lo, 16, 64)
		z, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil {
			return [2]uint64{a, z}
		}
	}
	t.Fatalf("no code mapping of %s in /proc/%d/maps", exe, pid)
	return [2]uint64{}
}
