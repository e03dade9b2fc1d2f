package collect

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/unwind"
)

// TestReadJITRule writes CPython's perf trampoline into anonymous
// executable memory of this process and reads the rule at its return
// address back through /proc/self/mem, as the walk does for a sampled
// process; code that is not a straight run to a return gives none.
func TestReadJITRule(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the JIT decoder reads x86-64 code")
	}
	mem, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE|syscall.PROT_EXEC, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		t.Skipf("no executable anonymous memory here: %v", err)
	}
	defer syscall.Munmap(mem)
	// sub $8, %rsp; call *%rcx; add $8, %rsp; ret, then a branch.
	copy(mem, []byte{0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3, 0x74, 0x02})
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	p := &proc.Process{PID: uint32(os.Getpid()), Mappings: []proc.Mapping{{Start: base, End: base + 4096}}}
	if jr := readJITRule(nil, p, base+6); !jr.ok || jr.r != (unwind.Rule{Kind: unwind.SPOffset, Offset: 16}) {
		t.Errorf("at the return address: %+v, want rsp+16", jr)
	}
	if jr := readJITRule(nil, p, base+11); jr.ok {
		t.Errorf("at a branch: %+v, want no rule", jr)
	}
	if jr := readJITRule(nil, p, base+8192); jr.ok {
		t.Errorf("outside the mapping: %+v, want no rule", jr)
	}
}
