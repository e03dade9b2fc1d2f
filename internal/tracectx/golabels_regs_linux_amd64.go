package tracectx

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// readLabelsOfRegs reads the labels of stopped thread tid: g is at its
// thread pointer (fsbase) + TLSG.
func readLabelsOfRegs(pid, tid int, info *GoRuntimeInfo) (map[string]string, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return nil, fmt.Errorf("read registers of thread %d: %w", tid, err)
	}
	return ReadGoLabels(goProcMem(pid), regs.Fs_base, info)
}

// ThreadPointer returns the thread pointer (fsbase) of the ptrace-stopped
// thread tid, from which ReadThreadContext finds TLS.
func ThreadPointer(tid int) (uint64, error) {
	var regs unix.PtraceRegs
	if err := unix.PtraceGetRegs(tid, &regs); err != nil {
		return 0, fmt.Errorf("read registers of thread %d: %w", tid, err)
	}
	return regs.Fs_base, nil
}
