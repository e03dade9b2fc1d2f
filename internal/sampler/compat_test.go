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

// ranges are a process's mappings from /proc/PID/maps: its executable
// ones and its main stack.
type ranges struct {
	exec  [][2]uint64
	stack [2]uint64
}

func (r ranges) inExec(ip uint64) bool {
	for _, m := range r.exec {
		if ip >= m[0] && ip < m[1] {
			return true
		}
	}
	return false
}

// TestCompatObjectUserRegisters loads the compat object (bpf/lib/compat.h,
// what Linux 5.10 gets) on this kernel and checks the user registers it
// copies from the top of the kernel stack, where the default object asks
// bpf_task_pt_regs, the default object in the same run as the peer. dd
// copying one byte at a time spends most of its time in system calls, and
// sleep waits: every tick that interrupted the kernel and every off-CPU
// wait of theirs must carry an instruction pointer in one of the
// process's executable mappings and a stack pointer in its stack, with a
// user stack. Left out: samples inside an exec before the new image's
// registers (flagged PreExec: they are the shell's), and samples with no
// user registers at all (a process past exit_mm), counted and bounded.
func TestCompatObjectUserRegisters(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tc := range []struct {
		name   string
		compat bool
	}{{"default", false}, {"compat", true}} {
		t.Run(tc.name, func(t *testing.T) { checkUserRegisters(t, tc.compat) })
	}
}

func checkUserRegisters(t *testing.T, compat bool) {
	cmd := exec.Command("sh", "-c", "while :; do dd if=/dev/zero of=/dev/null bs=1 count=20000 2>/dev/null; sleep 0.01; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The samples are of the shell's children: the whole machine is
	// sampled, and the records of dd and sleep kept here.
	s := startSampler(t, Options{Frequency: 499, OffCPU: OffCPUOptions{Enabled: true}, compat: compat})
	want := map[bool]string{false: "default", true: "compat"}[compat]
	if s.Object() != want {
		t.Fatalf("loaded the %s object, want %s", s.Object(), want)
	}
	stop := recordEvents(s)
	// The mappings of each child, read again and again while it runs: the
	// loader maps the libraries after the exec.
	seen := map[uint32]*ranges{}
	read := func() {
		for _, pid := range childPIDs(cmd.Process.Pid) {
			if r := readRanges(pid); r.stack[1] != 0 {
				if old := seen[uint32(pid)]; old != nil {
					r.exec = append(r.exec, old.exec...)
				}
				seen[uint32(pid)] = &r
			}
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		read()
		time.Sleep(2 * time.Millisecond)
	}
	events := stop()
	// The child running now was sampled up to stop: its mappings as they
	// are after it.
	read()
	var kern, off, kernOK, offOK, noRegs int
	for _, e := range events {
		r := e.Sample
		if r == nil || r.PreExec || r.Kind != OffCPU && len(r.KernStack) == 0 {
			continue
		}
		rg := seen[r.PID]
		if rg == nil || r.Comm != "dd" && r.Comm != "sleep" {
			continue
		}
		if r.UserIP == 0 && r.UserSP == 0 {
			noRegs++
			continue
		}
		good := rg.inExec(r.UserIP) && r.UserSP >= rg.stack[0] && r.UserSP < rg.stack[1] && len(r.UserStack) > 0
		if !good {
			t.Logf("%s %d kind %v: ip %#x sp %#x, %d user %d kernel frames (stack %#x-%#x)", r.Comm, r.PID, r.Kind, r.UserIP, r.UserSP, len(r.UserStack), len(r.KernStack), rg.stack[0], rg.stack[1])
		}
		if r.Kind == OffCPU {
			off++
			if good {
				offOK++
			}
		} else {
			kern++
			if good {
				kernOK++
			}
		}
	}
	c, _ := s.Counters()
	t.Logf("%s object: %d processes; ticks in the kernel %d (%d with user registers in the process's mappings); off-CPU %d (%d); %d without user registers; task_hash_full %d",
		s.Object(), len(seen), kern, kernOK, off, offOK, noRegs, c["task_hash_full"])
	if kern < 20 || off < 5 {
		t.Skipf("too few samples (%d in the kernel, %d off-CPU): the machine is too busy to judge", kern, off)
	}
	if kernOK < kern*99/100 || offOK < off*99/100 {
		t.Fatalf("user registers in the process's mappings: %d of %d kernel-mode ticks, %d of %d off-CPU waits (want ≥ 99%%)", kernOK, kern, offOK, off)
	}
	if noRegs > (kern+off)/10 {
		t.Fatalf("%d samples without user registers beside %d with: more than exiting processes explain", noRegs, kern+off)
	}
	if c["task_hash_full"] != 0 {
		t.Fatalf("task_hash_full = %d with a few threads", c["task_hash_full"])
	}
}

// readRanges reads the mappings of pid once it runs dd (zero ranges
// before its exec, or once it is gone).
func readRanges(pid int) ranges {
	var r ranges
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if c := strings.TrimSpace(string(comm)); c != "dd" && c != "sleep" {
		return r
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return r
	}
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		a, _ := strconv.ParseUint(lo, 16, 64)
		e, _ := strconv.ParseUint(hi, 16, 64)
		if strings.Contains(fs[1], "x") {
			r.exec = append(r.exec, [2]uint64{a, e})
		}
		if len(fs) > 5 && fs[5] == "[stack]" {
			r.stack = [2]uint64{a, e}
		}
	}
	return r
}

// childPIDs lists the children of pid (from /proc/PID/task/*/children).
func childPIDs(pid int) []int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
