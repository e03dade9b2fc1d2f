package tracectx

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// ReadLabels reads the pprof labels of the goroutine running on thread tid
// of process pid, the way the eBPF program does at sample time. It stops the
// thread briefly (PTRACE_SEIZE, PTRACE_INTERRUPT) to take its fsbase (x86) or
// its x28 (arm64, where Go keeps g) from PTRACE_GETREGS, reads with process_vm_readv while it is stopped (so m.curg
// cannot change under the walk), then detaches. It needs root or
// CAP_SYS_PTRACE. It exists to validate offsets and the walk; the agent
// never stops threads. The caller must not wait(2) for pid meanwhile: a
// wait on the thread group leader would take the leader's ptrace stop.
func ReadLabels(pid, tid int, info *GoRuntimeInfo) (map[string]string, error) {
	type result struct {
		labels map[string]string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// ptrace requests must come from the thread that attached. The
		// thread is never unlocked: when this goroutine ends it exits, and
		// the kernel detaches whatever a failed detach left traced (a
		// thread that died while traced would otherwise stay a zombie
		// until we reaped it, and its process could not finish exiting).
		runtime.LockOSThread()
		labels, err := readLabelsStopped(pid, tid, info)
		done <- result{labels, err}
	}()
	r := <-done
	return r.labels, r.err
}

// readLabelsStopped does ReadLabels's work on a locked thread.
func readLabelsStopped(pid, tid int, info *GoRuntimeInfo) (map[string]string, error) {
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, fmt.Errorf("ptrace seize thread %d: %w", tid, err)
	}
	// A signal arriving first (Go's preemption SIGURG) stops the thread
	// in signal-delivery-stop; hand it back on detach, or the thread
	// would lose it.
	var sig unix.Signal
	defer func() { goPtraceDetach(tid, sig) }()
	if err := unix.PtraceInterrupt(tid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt thread %d: %w", tid, err)
	}
	ws, err := goWaitStop(tid)
	if err != nil {
		return nil, err
	}
	if !ws.Stopped() {
		return nil, fmt.Errorf("stop thread %d: status %#x", tid, uint32(ws))
	}
	if ws.TrapCause() != unix.PTRACE_EVENT_STOP && ws.StopSignal() != unix.SIGTRAP {
		sig = ws.StopSignal()
	}
	return readLabelsOfRegs(pid, tid, info)
}

// goWaitStop waits for tid's ptrace stop. It polls, so that a stop that
// never comes to us (the thread exits, or a parent's wait on the thread
// group leader consumes the notification) is an error, not a hang.
func goWaitStop(tid int) (unix.WaitStatus, error) {
	var ws unix.WaitStatus
	deadline := time.Now().Add(2 * time.Second)
	for {
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return ws, fmt.Errorf("wait for thread %d to stop: %w", tid, err)
		case wpid == tid:
			return ws, nil
		case time.Now().After(deadline):
			return ws, fmt.Errorf("wait for thread %d to stop: no stop in 2s", tid)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// goPtraceDetach detaches from tid, delivering sig (0: none).
func goPtraceDetach(tid int, sig unix.Signal) {
	_, _, _ = unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sig), 0, 0)
}

// goProcMem reads another process's memory with process_vm_readv.
type goProcMem int

func (p goProcMem) ReadAt(b []byte, off int64) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	local := []unix.Iovec{{Base: &b[0]}}
	local[0].SetLen(len(b))
	remote := []unix.RemoteIovec{{Base: uintptr(off), Len: len(b)}}
	n, err := unix.ProcessVMReadv(int(p), local, remote, 0)
	if err != nil {
		return n, fmt.Errorf("read %d bytes at %#x of pid %d: %w", len(b), off, int(p), err)
	}
	if n < len(b) {
		return n, fmt.Errorf("read %d bytes at %#x of pid %d: short read of %d", len(b), off, int(p), n)
	}
	return n, nil
}
