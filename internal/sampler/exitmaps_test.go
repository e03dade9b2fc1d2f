package sampler

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/asm"

	"github.com/spanprof/spanprof/bpf"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/testutil"
)

// startExitMaps loads the sampler with the exit capture, or skips when the
// kernel cannot run it.
func startExitMaps(t *testing.T) *Sampler {
	t.Helper()
	testutil.RequireRoot(t)
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.exit == nil {
		if !kernelHas("bpf_iter_task_vma_new") {
			t.Skip("the kernel has no VMA iterator (Linux 6.7)")
		}
		t.Fatal("exit capture not loaded on a kernel with the VMA iterator")
	}
	go s.Run()
	return s
}

// pausedChild starts sh, which maps libc after the exec, and returns once
// it waits on its stdin, with its executable mappings as /proc shows them
// then. Closing the returned pipe makes it exit through exit_group.
func pausedChild(t *testing.T) (*exec.Cmd, io.WriteCloser, []proc.Mapping) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "echo ready; read x")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q: %v", line, err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ms, err := proc.ParseMaps(f)
	if err != nil {
		t.Fatal(err)
	}
	var want []proc.Mapping
	for _, m := range ms {
		// [vsyscall] is the kernel's, in no process's mm; anonymous code
		// (none in sh) is left to perf maps.
		if m.Path == "[vsyscall]" || m.Anonymous() && m.Path != "[vdso]" {
			continue
		}
		if m.Path == "[vdso]" {
			m.Dev = "00:00"
		}
		want = append(want, m)
	}
	return cmd, stdin, want
}

// exitMapsOf waits for the capture of pid's exit.
func exitMapsOf(t *testing.T, s *Sampler, pid int) ProcEvent {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-s.Events():
			if e := ev.Proc; e != nil && e.PID == uint32(pid) && e.Maps != nil {
				return *e
			}
		case <-deadline:
			c, _ := s.Counters()
			t.Fatalf("no mappings captured at the exit of %d; counters %v", pid, c)
		}
	}
}

func sameMappings(t *testing.T, gotVMAs []VMA, want []proc.Mapping) {
	t.Helper()
	got := make([]proc.Mapping, len(gotVMAs))
	for i, v := range gotVMAs {
		got[i] = proc.Mapping(v)
	}
	if len(got) != len(want) {
		t.Fatalf("captured %d mappings, /proc showed %d:\ngot  %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: captured %+v, /proc showed %+v", i, got[i], want[i])
		}
	}
}

// TestExitMapsMatchProcMaps checks that the mappings captured as a process
// exits are the executable ones /proc/PID/maps showed: ranges, offsets,
// files and paths, the libraries mapped after the exec and the vDSO.
func TestExitMapsMatchProcMaps(t *testing.T) {
	s := startExitMaps(t)
	cmd, stdin, want := pausedChild(t)
	stdin.Close()
	e := exitMapsOf(t, s, cmd.Process.Pid)
	sameMappings(t, e.Maps, want)
	if e.MapsDropped != 0 {
		t.Errorf("%d mappings dropped", e.MapsDropped)
	}
	t.Logf("captured at exit: %+v (executable %s)", e.Maps, e.Exe)
	found := false
	for _, m := range e.Maps {
		found = found || m.Path == e.Exe
	}
	if e.Exe == "" || !found || !strings.Contains(e.Exe, "sh") {
		t.Errorf("executable %q not among the captured mappings", e.Exe)
	}
	var libc bool
	for _, m := range e.Maps {
		libc = libc || strings.Contains(m.Path, "libc.so")
	}
	if !libc {
		t.Errorf("libc, mapped by the loader after the exec, is not among %+v", e.Maps)
	}
}

// TestExitMapsKilled kills the process instead: no exit_group, so the
// capture is at sched_process_exit, where kernels from 6.16 still have the
// mm. Older ones count the exit as missed rather than drop it silently.
func TestExitMapsKilled(t *testing.T) {
	s := startExitMaps(t)
	before, _ := s.Counters()
	cmd, _, want := pausedChild(t)
	cmd.Process.Signal(syscall.SIGKILL)
	deadline := time.After(2 * time.Second)
	for {
		select {
		case ev := <-s.Events():
			if e := ev.Proc; e != nil && e.PID == uint32(cmd.Process.Pid) && e.Maps != nil {
				sameMappings(t, e.Maps, want)
				return
			}
		case <-deadline:
			c, _ := s.Counters()
			if c["exit_maps_missed"] > before["exit_maps_missed"] {
				t.Skip("this kernel traces sched_process_exit after the mm is gone (before 6.16): the exit was counted as missed")
			}
			t.Fatalf("the killed process was neither captured nor counted missed; counters %v", c)
		}
	}
}

// TestExitMapsOptional loads exit-capture programs the verifier rejects:
// the error says so, and the sampler keeps running without them.
func TestExitMapsOptional(t *testing.T) {
	testutil.RequireRoot(t)
	s, err := New(Options{Frequency: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	had, links := s.exit, len(s.links)
	spec, err := bpf.LoadExitMaps()
	if err != nil {
		t.Fatal(err)
	}
	// Returns without setting R0: no kernel accepts it.
	spec.Programs[bpf.ExitMapsProgCaptureExitGroup].Instructions = asm.Instructions{asm.Return()}
	err = s.loadExitMapsSpec(spec)
	if err == nil || !strings.Contains(err.Error(), "verifier rejected") {
		t.Fatalf("loading a rejected program: %v", err)
	}
	if s.exit != had || len(s.links) != links {
		t.Error("a failed load changed the sampler's programs")
	}
	if _, err := s.Counters(); err != nil {
		t.Errorf("counters: %v", err)
	}
}
