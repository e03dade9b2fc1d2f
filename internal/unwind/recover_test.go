// The workloads are x86-64 builds, and the registers are read from x86-64
// ptrace state.

//go:build amd64

package unwind

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/symbolize"
)

// TestRecoverLiveLeaf stops a running gcc-built fixture many times with
// ptrace, as a sampler would interrupt it, and checks that whenever the
// rule says the frame-pointer walk lost the caller, the recovered return
// address is in the right caller.
func TestRecoverLiveLeaf(t *testing.T) {
	runtime.LockOSThread() // ptrace requests must come from the tracer thread
	defer runtime.UnlockOSThread()

	bin, _ := filepath.Abs(fixture("chain-gcc"))
	cmd := exec.Command(bin, "2000000000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if err := syscall.PtraceAttach(pid); err != nil {
		t.Skipf("ptrace not permitted here (seccomp or yama): %v", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}

	syms, err := symbolize.New(nil, symbolize.Options{}).Open(bin, bin)
	if err != nil {
		t.Fatal(err)
	}
	tab := openTable(t, bin)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()

	callers := map[string]string{"leaf": "d", "leaf_nofp": "d", "leaf_stack": "d", "d": "c", "c": "b", "b": "a", "a": "main"}
	recovered := map[string]int{}
	var inText, outside int
	// Stop until enough leaf samples, however slow the loader is to reach
	// main on a busy machine.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; recovered["leaf"] < 30 && time.Now().Before(deadline); i++ {
		if i > 0 {
			if err := syscall.PtraceCont(pid, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Microsecond) // let it run a little
			syscall.Kill(pid, syscall.SIGSTOP)
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
				t.Fatal(err)
			}
		}
		var regs syscall.PtraceRegs
		if err := syscall.PtraceGetRegs(pid, &regs); err != nil {
			t.Fatal(err)
		}
		m := textMapping(t, pid, regs.Rip)
		if m == nil {
			outside++
			continue // in libc or the loader
		}
		inText++
		vaddr, ok := syms.VirtualAddress(*m, regs.Rip)
		if !ok {
			t.Fatalf("rip %#x not in a segment", regs.Rip)
		}
		fn, _ := syms.Lookup(vaddr)
		rule, err := tab.RuleAt(vaddr)
		if err != nil {
			t.Fatal(err)
		}
		stack := make([]byte, 512)
		if _, err := mem.ReadAt(stack, int64(regs.Rsp)); err != nil {
			t.Fatal(err)
		}
		ra, ok := RecoverCaller(rule, regs.Rsp, stack)
		if !ok {
			if rule.Kind == SPOffset {
				t.Errorf("%s at %#x: rule %v but nothing recovered", fn.Function, vaddr, rule)
			}
			continue
		}
		raVaddr, _ := syms.VirtualAddress(*m, ra)
		caller, _ := syms.Lookup(raVaddr)
		if want := callers[fn.Function]; want != "" && caller.Function != want {
			t.Errorf("%s (%v): recovered caller %q, want %q", fn.Function, rule, caller.Function, want)
		}
		recovered[fn.Function]++
	}
	t.Logf("callers recovered by function: %v; stops in the fixture's code %d, elsewhere %d", recovered, inText, outside)
	if inText == 0 {
		// Seen once on a loaded machine: every stop landed outside the
		// fixture's text for 20 s. Nothing about recovery can be judged.
		t.Skipf("no stop landed in the fixture's own code (%d elsewhere)", outside)
	}
	if recovered["leaf"] == 0 {
		t.Error("no sample in gcc's frameless leaf had its caller recovered")
	}
}

// textMapping returns the executable mapping of the fixture containing
// addr, or nil when addr is in another file.
func textMapping(t *testing.T, pid int, addr uint64) *symbolize.Mapping {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[5], "chain-gcc") {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		limit, _ := strconv.ParseUint(hi, 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		if addr >= start && addr < limit {
			return &symbolize.Mapping{Start: start, Limit: limit, Offset: off}
		}
	}
	return nil
}
