package sampler

import (
	"os/exec"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// TestOffCPUPipeWait blocks a child shell in read(2) on a pipe for a known
// interval and checks the kernel reports that wait: an S-state off-CPU
// record of the child, switched out after the first line was written,
// lasting at least until the second line was, with both stacks. A thread
// seen for the first time is captured with probability 1, so the record
// carries the exact duration.
func TestOffCPUPipeWait(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sh", "-c", "read a; read b")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	s := startSampler(t, Options{Frequency: 99, PIDs: []int{cmd.Process.Pid}, OffCPU: OffCPUOptions{Enabled: true}})

	// The shell blocked before the program was attached; this wakes it so
	// that its next wait is seen from the start.
	first := time.Now()
	if _, err := stdin.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	second := time.Now()
	if _, err := stdin.Write([]byte("b\n")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	s.Stop()

	var found bool
	var offCPU int
	for _, r := range drain(s) {
		if r.Kind != OffCPU {
			continue
		}
		offCPU++
		t.Logf("off-CPU tid %d state %c at %v for %v, %d kernel %d user frames", r.TID, r.State, r.Time.Sub(first), time.Duration(r.Value), len(r.KernStack), len(r.UserStack))
		if r.PID != uint32(cmd.Process.Pid) {
			t.Fatalf("off-CPU record of pid %d, filter is %d", r.PID, cmd.Process.Pid)
		}
		if r.State != 'S' && r.State != 'D' {
			t.Errorf("off-CPU record with state %q", r.State)
		}
		// A wait's record is stamped when the thread ran again: the
		// wait began Value before it.
		begin := r.Time.Add(-time.Duration(r.Value))
		if begin.After(first) && begin.Before(second) && !r.Time.Before(second) {
			found = true
			if r.State != 'S' {
				t.Errorf("pipe wait in state %q, want S", r.State)
			}
			if len(r.KernStack) == 0 || len(r.UserStack) == 0 {
				t.Errorf("pipe wait with %d kernel and %d user frames (errors %d, %d)", len(r.KernStack), len(r.UserStack), r.KernErr, r.UserErr)
			}
		}
	}
	c, _ := s.Counters()
	t.Logf("off-CPU records %d, counters %v", offCPU, c)
	if !found {
		t.Fatal("no off-CPU record covers the shell's wait for its second line")
	}
}

// drain returns the records left after Stop: Run closes the channel once
// the ring is empty.
func drain(s *Sampler) []*Record {
	var out []*Record
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-s.Events():
			if !ok {
				return out
			}
			if e.Sample != nil {
				out = append(out, e.Sample)
			}
		case <-timeout:
			return out
		}
	}
}
