package sampler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Capabilities spanprof needs; numbers from linux/capability.h.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// ErrPrivileges is returned when the process may not load eBPF programs.
var ErrPrivileges = errors.New("spanprof needs root or CAP_BPF+CAP_PERFMON (and CAP_SYS_PTRACE to read other processes)")

// ErrNoBTF is returned when the kernel exposes no BTF.
var ErrNoBTF = errors.New("kernel has no BTF (/sys/kernel/btf/vmlinux missing): spanprof needs a kernel built with CONFIG_DEBUG_INFO_BTF")

// ErrKernelTooOld is returned for kernels before 5.10.
var ErrKernelTooOld = errors.New("kernel too old: spanprof needs Linux 5.10 or later")

func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// Preflight checks privileges, BTF and the kernel version, and returns
// the first problem as a user-facing error.
func Preflight() error {
	caps, err := effectiveCaps()
	if err != nil {
		return err
	}
	has := func(c uint) bool { return caps&(1<<c) != 0 }
	if !has(capSysAdmin) && !(has(capBPF) && has(capPerfmon)) {
		missing := []string{}
		if !has(capBPF) {
			missing = append(missing, "CAP_BPF")
		}
		if !has(capPerfmon) {
			missing = append(missing, "CAP_PERFMON")
		}
		return fmt.Errorf("%w; missing %s", ErrPrivileges, strings.Join(missing, "+"))
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return ErrNoBTF
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		if maj, min, ok := parseRelease(unix.ByteSliceToString(u.Release[:])); ok && (maj < 5 || maj == 5 && min < 10) {
			return fmt.Errorf("%w (running %d.%d)", ErrKernelTooOld, maj, min)
		}
	}
	return nil
}

func parseRelease(r string) (major, minor int, ok bool) {
	parts := strings.SplitN(r, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	minor, err2 := strconv.Atoi(minorStr)
	return major, minor, err1 == nil && err2 == nil
}

// OnlineCPUs parses /sys/devices/system/cpu/online ("0-3,5").
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("read online cpus: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		lo, hi, found := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("parse cpu list %q: %w", s, err)
		}
		b := a
		if found {
			if b, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("parse cpu list %q: %w", s, err)
			}
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}
