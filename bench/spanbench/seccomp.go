package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// seccompRlimitFlag, as spanbench's first argument, makes it a launcher:
// `spanbench -seccomp-rlimit-exec -- PROG ARGS...` installs
// rlimitFilter and execs PROG. The per-sample phase starts the
// OpenTelemetry eBPF profiler this way, always: that profiler raises
// RLIMIT_MEMLOCK to infinity (prlimit64) before loading eBPF and exits
// when it cannot, with no flag to skip it, and root without
// CAP_SYS_RESOURCE (as in this container) cannot raise the hard limit.
// The limit does not matter since Linux 5.11: the kernel charges BPF
// memory to the memory cgroup, not to RLIMIT_MEMLOCK. Faking the call
// is simpler than telling the two cases apart, and changes nothing where
// the call would have succeeded.
const seccompRlimitFlag = "-seccomp-rlimit-exec"

// seccompRlimitExec installs rlimitFilter on every thread and execs
// args[0] (looked up in PATH) with args; it returns only on failure.
func seccompRlimitExec(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return fmt.Errorf("usage: spanbench %s -- PROG [ARGS...]", seccompRlimitFlag)
	}
	prog, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	// The filter is installed from this thread and synchronised to the
	// others (TSYNC: the Go runtime is multithreaded); exec from it too.
	runtime.LockOSThread()
	if filter := rlimitFilter(); filter != nil {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %w", err)
		}
		fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
		if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
			unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
			return fmt.Errorf("seccomp: %w", e)
		}
		runtime.KeepAlive(filter)
	}
	return unix.Exec(prog, args, os.Environ())
}

// Offsets in struct seccomp_data: nr, arch, then args[6] as u64 from 16
// (little-endian on both architectures below: low half first).
const (
	seccompNr   = 0
	seccompArch = 4
)

func seccompArg(i int, high bool) uint32 {
	off := uint32(16 + 8*i)
	if high {
		off += 4
	}
	return off
}

// rlimitFilter is a classic BPF seccomp program under which setting
// RLIMIT_MEMLOCK returns 0 without running: setrlimit(RLIMIT_MEMLOCK, …)
// and prlimit64(…, RLIMIT_MEMLOCK, new != NULL, …) (which leaves old
// unwritten: the profiler keeps it only to restore it, which is faked
// too). Every other call runs, reading RLIMIT_MEMLOCK and setting other
// limits (the Go runtime raises RLIMIT_NOFILE at start) included. nil on
// architectures other than amd64 and arm64: no filter there.
func rlimitFilter() []unix.SockFilter {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return nil
	}
	// Instruction indices, for the jumps.
	const (
		prlimit   = 4
		setrlim   = 10
		allow     = 13
		fake      = 14
		memlock   = unix.RLIMIT_MEMLOCK
		ld        = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq       = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret       = unix.BPF_RET | unix.BPF_K
		errnoZero = unix.SECCOMP_RET_ERRNO | 0 // the call returns -0: success
	)
	var f []unix.SockFilter
	stmt := func(code uint16, k uint32) { f = append(f, unix.SockFilter{Code: code, K: k}) }
	// jump to absolute instructions t (true) and e (false).
	jump := func(k uint32, t, e int) {
		i := len(f)
		f = append(f, unix.SockFilter{Code: jeq, K: k, Jt: uint8(t - i - 1), Jf: uint8(e - i - 1)})
	}
	stmt(ld, seccompArch)                              // 0
	jump(arch, 2, allow)                               // 1: another ABI (e.g. 32-bit compat): allow
	stmt(ld, seccompNr)                                // 2
	jump(uint32(unix.SYS_PRLIMIT64), prlimit, setrlim) // 3
	stmt(ld, seccompArg(1, false))                     // 4 = prlimit: resource
	jump(memlock, 6, allow)                            // 5
	stmt(ld, seccompArg(2, false))                     // 6: new_limit, low half
	jump(0, 8, fake)                                   // 7
	stmt(ld, seccompArg(2, true))                      // 8: new_limit, high half
	jump(0, allow, fake)                               // 9: NULL: only reads the limit
	jump(uint32(unix.SYS_SETRLIMIT), 11, allow)        // 10 = setrlim (A is still nr)
	stmt(ld, seccompArg(0, false))                     // 11: resource
	jump(memlock, fake, allow)                         // 12
	stmt(ret, unix.SECCOMP_RET_ALLOW)                  // 13 = allow
	stmt(ret, errnoZero)                               // 14 = fake
	if len(f) != fake+1 {
		panic("rlimitFilter: instruction indices out of step")
	}
	return f
}
