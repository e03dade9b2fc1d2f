package tracectx

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// goRegG is the register the Go runtime keeps g in on arm64 (R28).
const goRegG = 28

// readLabelsOfRegs reads the labels of stopped thread tid from its g, which
// is in x28: the eBPF program reads the same register from the thread's
// saved user registers.
func readLabelsOfRegs(pid, tid int, info *GoRuntimeInfo) (map[string]string, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return nil, fmt.Errorf("read registers of thread %d: %w", tid, err)
	}
	return ReadGoLabelsOfG(goProcMem(pid), regs.Regs[goRegG], info)
}

// ntARMTLS is the register set of tpidr_el0 (NT_ARM_TLS).
const ntARMTLS = 0x401

// ThreadPointer returns the thread pointer (tpidr_el0) of the
// ptrace-stopped thread tid, from which ReadThreadContext finds TLS.
func ThreadPointer(tid int) (uint64, error) {
	var tp uint64
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&tp))}
	iov.SetLen(8)
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGSET, uintptr(tid), ntARMTLS,
		uintptr(unsafe.Pointer(&iov)), 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("read tpidr_el0 of thread %d: %w", tid, errno)
	}
	return tp, nil
}
