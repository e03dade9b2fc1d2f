package sampler

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF programs")
	}
}

// TestSamplesBusyChild runs a busy child process and checks the kernel
// sends samples for it with stacks and a clock close to now.
func TestSamplesBusyChild(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	s, err := New(Options{Frequency: 999, PIDs: []int{cmd.Process.Pid}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	go s.Run()
	deadline := time.After(time.Second)
	var n, withUser, withTop int
loop:
	for {
		select {
		case r := <-s.Records():
			if r.PID != uint32(cmd.Process.Pid) {
				t.Fatalf("record for pid %d, filter is %d", r.PID, cmd.Process.Pid)
			}
			if d := time.Since(r.Time); d < 0 || d > 500*time.Millisecond {
				t.Fatalf("record time %v is %v from now", r.Time, d)
			}
			n++
			if len(r.UserStack) > 0 && r.UserIP != 0 {
				withUser++
			}
			if len(r.StackTop) > 0 {
				withTop++
			}
		case <-deadline:
			break loop
		}
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("records=%d user=%d top=%d counters=%v", n, withUser, withTop, c)
	// One busy thread at 999 Hz for a second: expect most of 999 ticks.
	if n < 600 {
		t.Fatalf("got %d samples in 1s at 999 Hz, want ≥ 600", n)
	}
	if withUser < n*99/100 || withTop < n*99/100 {
		t.Fatalf("user stacks in %d, stack tops in %d of %d samples", withUser, withTop, n)
	}
}
