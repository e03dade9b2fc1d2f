package sampler

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// cpuTime returns the user+system CPU time of pid from /proc/PID/stat.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the parenthesised command: state is field 3; utime and
	// stime are fields 14 and 15.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100
}

// startSampler loads, attaches and runs a sampler, closed when the test
// ends.
func startSampler(t *testing.T, opts Options) *Sampler {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	go s.Run()
	return s
}

// recordEvents takes every event of s from now on; the function it
// returns stops s and returns them, in stream order.
func recordEvents(s *Sampler) (stop func() []Event) {
	var events []Event
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range s.Events() {
			events = append(events, e)
		}
	}()
	return func() []Event {
		s.Stop()
		<-done
		return events
	}
}

// TestSamplesBusyChild runs a busy child process and checks the kernel
// sends samples for it with stacks and a clock close to now.
func TestSamplesBusyChild(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	s := startSampler(t, Options{Frequency: 999, PIDs: []int{cmd.Process.Pid}})
	cpu0 := cpuTime(t, cmd.Process.Pid)
	deadline := time.After(time.Second)
	var n, withUser, withTop int
	check := func(r *Record) {
		if r.PID != uint32(cmd.Process.Pid) {
			t.Fatalf("record for pid %d, filter is %d", r.PID, cmd.Process.Pid)
		}
		// Records wait in the ring for up to pollInterval.
		if d := time.Since(r.Time); d < 0 || d > pollInterval+500*time.Millisecond {
			t.Fatalf("record time %v is %v from now", r.Time, d)
		}
		n++
		if len(r.UserStack) > 0 && r.UserIP != 0 {
			withUser++
		}
		if len(r.StackTop) > 0 {
			withTop++
		}
	}
loop:
	for {
		select {
		case e := <-s.Events():
			if e.Sample != nil {
				check(e.Sample)
			}
		case <-deadline:
			break loop
		}
	}
	ran := cpuTime(t, cmd.Process.Pid) - cpu0
	// Stop wakes the reader, which hands over what the ring still holds and
	// closes the channel.
	s.Stop()
	if !Drain(s.Events(), 5*time.Second, func(e Event) {
		if e.Sample != nil {
			check(e.Sample)
		}
	}) {
		t.Fatal("the channels were not closed within 5s of Stop")
	}
	c, err := s.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// The CPU clock ticks only while the child runs: on a loaded machine
	// it gets less than a second of CPU, so judge the rate by its CPU time
	// (procfs counts it in 10 ms ticks).
	want := ran.Seconds() * 999
	t.Logf("records=%d for %v of CPU (%.0f expected at 999 Hz) user=%d top=%d counters=%v", n, ran, want, withUser, withTop, c)
	if ran < 100*time.Millisecond {
		t.Skipf("the child got only %v of CPU: the machine is too busy to judge the rate", ran)
	}
	if float64(n) < 0.8*want-20 || float64(n) > 1.1*want+20 {
		t.Fatalf("got %d samples for %v of CPU at 999 Hz, want about %.0f", n, ran, want)
	}
	// Every sample the programs wrote reached the consumer or was counted
	// as dropped on the way.
	if got := uint64(n) + c["lost_queue_full"] + c["lost_decode"]; got != c["samples"] {
		t.Fatalf("%d records received or dropped, the programs wrote %d", got, c["samples"])
	}
	if withUser < n*99/100 || withTop < n*99/100 {
		t.Fatalf("user stacks in %d, stack tops in %d of %d samples", withUser, withTop, n)
	}
}

// TestCheckFeatures runs the feature probes on this kernel, which has
// every feature they look for (6.18): none may report one missing.
func TestCheckFeatures(t *testing.T) {
	testutil.RequireRoot(t)
	kf, err := checkFeatures()
	if err != nil {
		t.Fatal(err)
	}
	if kf.compat || len(kf.degraded) > 0 {
		t.Fatalf("on this kernel: compat object %v, missing %q", kf.compat, kf.degraded)
	}
}
