package sampler

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/symbolize"
	"github.com/spanprof/spanprof/internal/testutil"
)

// execFunctions are kernel functions of an exec, from the system call to
// the new image's registers.
var execFunctions = []string{"__x64_sys_execve", "do_execveat_common", "bprm_execve", "exec_binprm",
	"search_binary_handler", "load_elf_binary", "begin_new_exec", "exec_mmap", "elf_load", "setup_arg_pages"}

// TestPreExecFlagInsideExecve spawns children the way Go's os/exec and
// posix_spawn do (clone with CLONE_VM|CLONE_VFORK, the child running in
// this process's address space until its execve) and samples every
// process: the children's samples taken inside execve before the new
// image's registers are set are flagged, with this process as the parent,
// and their user instruction pointer lies in this process's code, not in
// the new image. Samples outside an exec are never flagged.
func TestPreExecFlagInsideExecve(t *testing.T) {
	testutil.RequireRoot(t)
	ks, err := symbolize.LoadKallsyms("/proc/kallsyms")
	if err != nil || ks.Len() == 0 {
		t.Skipf("kernel symbols unreadable (%v): samples inside execve cannot be told", err)
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	selfMaps, err := proc.ParseMaps(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	self := &proc.Process{Mappings: selfMaps}
	proc.SortMappings(self.Mappings)

	s := startSampler(t, Options{Frequency: 999})

	children := map[uint32]bool{}
	var recs []*Record
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range s.Events() {
			if e.Sample != nil {
				recs = append(recs, e.Sample)
			}
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			t.Fatalf("spawn %d: %v", n, err)
		}
		children[uint32(cmd.Process.Pid)] = true
		cmd.Wait()
	}
	s.Stop()
	<-done

	inExec := func(r *Record) string {
		for _, a := range r.KernStack {
			name, _, _ := ks.Lookup(a)
			for _, fn := range execFunctions {
				if name == fn {
					return fn
				}
			}
		}
		return ""
	}
	// A kernel stack of a frame or two says nothing either way: the
	// kernel's walk stops early in a few places (the retpoline thunks).
	shortKernel := func(r *Record) bool { return len(r.KernStack) < 3 }
	me := uint32(os.Getpid())
	var flagged, inElf, inElfFlagged, childRecs int
	for _, r := range recs {
		if !children[r.PID] {
			if r.PreExec && inExec(r) == "" && !shortKernel(r) {
				t.Errorf("pid %d (%s): flagged outside an exec, kernel stack %x", r.PID, r.Comm, r.KernStack)
			}
			continue
		}
		childRecs++
		fn := inExec(r)
		if fn == "load_elf_binary" || fn == "elf_load" || fn == "begin_new_exec" {
			inElf++
			if r.PreExec {
				inElfFlagged++
			}
		}
		if !r.PreExec {
			continue
		}
		flagged++
		if fn == "" && !shortKernel(r) {
			t.Errorf("child %d (%s): flagged outside an exec, kernel stack %x", r.PID, r.Comm, r.KernStack)
		}
		if r.ParentPID != me {
			t.Errorf("child %d: parent %d, want %d", r.PID, r.ParentPID, me)
		}
		if m := self.Find(r.UserIP); m == nil || m.Anonymous() {
			t.Errorf("child %d (%s) inside %s: user ip %#x in no code mapping of its parent", r.PID, r.Comm, fn, r.UserIP)
		}
	}
	t.Logf("%d children, %d of their samples, %d flagged inside execve; %d in the ELF loader, %d of them flagged",
		len(children), childRecs, flagged, inElf, inElfFlagged)
	if flagged == 0 {
		t.Fatalf("no sample of %d children flagged inside execve", len(children))
	}
	// Before start_thread, the loader's samples all have the old
	// registers; a sample after it (the last lines of load_elf_binary)
	// is rare.
	if inElfFlagged < inElf*9/10 {
		t.Errorf("%d of %d samples in the ELF loader flagged, want nearly all", inElfFlagged, inElf)
	}
}
