package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The pointer-authentication bits of arm64 return addresses. A function
// built with -mbranch-protection=pac-ret (standard) signs x30 before it
// stores it in its frame record: the frame-pointer walk reads return
// addresses with an authentication code in their upper bits, which no
// mapping holds. The kernel strips them from its own callchains
// (ptrauth_strip_insn_pac); the eBPF walk copies the words as they are,
// and the decoder strips them with the mask the kernel tells.

const (
	// ntARMPACMask is the regset of struct user_pac_mask {data_mask,
	// insn_mask} (NT_ARM_PAC_MASK, linux/elf.h).
	ntARMPACMask = 0x406
	// hwcapPACA: the kernel enabled address authentication for user
	// space (HWCAP_PACA, asm/hwcap.h).
	hwcapPACA = 1 << 30
	atHWCAP   = 16 // AT_HWCAP, elf.h
)

// errNoPAC: the machine does not sign user return addresses.
var errNoPAC = errors.New("no pointer authentication")

// readPACMask returns the bits of a user instruction address the kernel's
// pointer authentication uses: 0 with errNoPAC off arm64 or where user
// space has no pointer authentication. The mask is the same for every
// process of a boot (it depends on the virtual address size only), so
// one stopped thread tells it: a child of this executable, stopped by
// ptrace at its exec before it runs, and killed.
func readPACMask() (uint64, error) {
	if runtime.GOARCH != "arm64" {
		return 0, errNoPAC
	}
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 0, fmt.Errorf("read auxv: %w", err)
	}
	if hwcap(auxv)&hwcapPACA == 0 {
		return 0, errNoPAC
	}
	// PTRACE_GETREGSET must come from the thread that traces the child,
	// the one that started it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe")
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start a traced child: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		return 0, fmt.Errorf("wait for the traced child to stop: %v (status %#x)", err, ws)
	}
	var mask [2]uint64
	iov := unix.Iovec{Base: (*byte)(unsafe.Pointer(&mask[0]))}
	iov.SetLen(int(unsafe.Sizeof(mask)))
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGSET, uintptr(cmd.Process.Pid), ntARMPACMask,
		uintptr(unsafe.Pointer(&iov)), 0, 0); e != 0 {
		return 0, fmt.Errorf("read NT_ARM_PAC_MASK: %w", e)
	}
	return mask[1], nil
}

// hwcap returns AT_HWCAP of an auxiliary vector.
func hwcap(auxv []byte) uint64 {
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.LittleEndian.Uint64(auxv[i:]) == atHWCAP {
			return binary.LittleEndian.Uint64(auxv[i+8:])
		}
	}
	return 0
}
