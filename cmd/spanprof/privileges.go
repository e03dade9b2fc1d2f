package main

// Capabilities after start-up. `record` and `agent` need root or
// CAP_BPF+CAP_PERFMON to load the eBPF programs (sampler.Preflight names
// what is missing). Once the programs are loaded and attached, the agent
// runs for days reading other processes' files and memory; it keeps only
// what that needs, so a bug in the parsers of those files (ELF, DWARF,
// pclntab, process context) cannot be turned into, say, CAP_SYS_ADMIN.
//
// Kept (runtimeCapabilities):
//
//	CAP_BPF, CAP_PERFMON  attach uprobes later (spanprof_set_trace_context
//	                      hooks of processes that start after the agent)
//	CAP_SYS_PTRACE        read /proc/PID/mem, maps, environ, root of others
//	CAP_DAC_READ_SEARCH   open binaries and libraries whatever their modes
//	CAP_CHECKPOINT_RESTORE open /proc/PID/map_files (deleted or replaced
//	                      files); without it the tracker falls back to
//	                      /proc/PID/root/PATH
//	CAP_SYS_ADMIN         only on kernels without CAP_BPF (before 5.8),
//	                      where it stands for CAP_BPF+CAP_PERFMON
//
// Both keep jvmAttachCapabilities too while they ask JVMs for their perf
// maps (not with --no-jvm-perfmap or symbolization.no_jvm_perfmap).
// `record` drops the same way after attaching, keeping CAP_DAC_OVERRIDE
// too when it writes a file (see dropRecordCapabilities).
//
// Dropped: everything else, in particular CAP_SYS_ADMIN, CAP_SYS_RESOURCE
// (memlock, only before load), CAP_SYSLOG (/proc/kallsyms is read at
// start), CAP_NET_BIND_SERVICE (the metrics port is bound at start), and
// CAP_SETPCAP after it served to shrink the bounding set. The bounding set
// and ambient set are cleared too, and no_new_privs is set: spanprof never
// executes anything, so nothing it runs can regain a capability.
//
// Capabilities are per thread in Linux, so the drop must reach every
// thread. It goes through libcap's psx.Syscall6: without cgo that is
// syscall.AllThreadsSyscall; with cgo (a plain `go build` on a machine
// with a C compiler links cgo for the net package's resolver), where Go
// refuses AllThreadsSyscall because it cannot see threads C created, psx
// wraps pthread_create to know every thread and runs the call on each by
// a signal. Either way the drop is then verified on every thread in
// /proc/self/task. Both builds therefore drop; making the plain build
// come out without cgo instead would take a build tag (netgo) that a
// plain `go build` does not pass.

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// capability is a Linux capability number (linux/capability.h).
type capability uint

const (
	capDacOverride       capability = 1
	capDacReadSearch     capability = 2
	capChown             capability = 0
	capKill              capability = 5
	capSetgid            capability = 6
	capSetuid            capability = 7
	capSetpcap           capability = 8
	capSysPtrace         capability = 19
	capSysAdmin          capability = 21
	capSysResource       capability = 24
	capSyslog            capability = 34
	capPerfmon           capability = 38
	capBPF               capability = 39
	capCheckpointRestore capability = 40
)

var capNames = map[capability]string{
	capChown:             "CAP_CHOWN",
	capKill:              "CAP_KILL",
	capSetgid:            "CAP_SETGID",
	capSetuid:            "CAP_SETUID",
	capDacOverride:       "CAP_DAC_OVERRIDE",
	capDacReadSearch:     "CAP_DAC_READ_SEARCH",
	capSetpcap:           "CAP_SETPCAP",
	capSysPtrace:         "CAP_SYS_PTRACE",
	capSysAdmin:          "CAP_SYS_ADMIN",
	capSysResource:       "CAP_SYS_RESOURCE",
	capSyslog:            "CAP_SYSLOG",
	capPerfmon:           "CAP_PERFMON",
	capBPF:               "CAP_BPF",
	capCheckpointRestore: "CAP_CHECKPOINT_RESTORE",
}

func (c capability) String() string {
	if n, ok := capNames[c]; ok {
		return n
	}
	return "CAP_" + strconv.Itoa(int(c))
}

// lastCap is the highest capability the kernel knows.
func lastCap() capability {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return capability(n)
		}
	}
	return capCheckpointRestore
}

// dropRecordCapabilities is the agent's drop for `record`, once its
// programs are attached: record needs what the agent needs, and, when it
// writes a file, CAP_DAC_OVERRIDE to create it where it was asked (a
// directory of the user who ran sudo, say).
func dropRecordCapabilities(output, attachJVMs bool, log *slog.Logger) {
	keep := runtimeCapabilities()
	if output {
		keep = append(keep, capDacOverride)
	}
	if attachJVMs {
		keep = append(keep, jvmAttachCapabilities...)
	}
	if kept, err := dropCapabilities(keep); err != nil {
		log.Warn("keeping start-up capabilities", "error", err)
	} else {
		log.Debug("dropped capabilities not needed after start-up", "kept", fmt.Sprint(kept))
	}
}

// jvmAttachCapabilities are what asking a JVM of another user for its
// perf map takes (internal/jvm): the trigger file in its working
// directory, owned by it, SIGQUIT, and its ids at connect.
var jvmAttachCapabilities = []capability{capDacOverride, capChown, capKill, capSetuid, capSetgid}

// runtimeCapabilities is what the agent keeps after start-up on this
// kernel (see the comment at the top of the file).
func runtimeCapabilities() []capability {
	last := lastCap()
	keep := []capability{capSysPtrace, capDacReadSearch}
	if last >= capBPF {
		keep = append(keep, capBPF, capPerfmon)
	} else {
		keep = append(keep, capSysAdmin)
	}
	if last >= capCheckpointRestore {
		keep = append(keep, capCheckpointRestore)
	}
	return keep
}

// dropCapabilities keeps only keep (those of them the process has) in the
// effective and permitted sets of every thread, clears the inheritable,
// ambient and bounding sets of the rest and sets no_new_privs. It returns
// the capabilities kept.
func dropCapabilities(keep []capability) ([]capability, error) {
	have, err := threadCaps()
	if err != nil {
		return nil, err
	}
	var mask uint64
	var kept []capability
	for _, c := range keep {
		// A capability asked for twice (record's file writing and the
		// JVM attach both keep CAP_DAC_OVERRIDE) is kept once.
		if have.permitted&(1<<c) != 0 && mask&(1<<c) == 0 {
			mask |= 1 << c
			kept = append(kept, c)
		}
	}
	// Each step runs on every thread; a failure on any thread is an error.
	all := func(trap, a1, a2, a3 uintptr) error {
		// Six arguments, so prctl's unused ones are zero, as it demands
		// (psx's three-argument call leaves them to chance under cgo).
		_, _, errno := psx.Syscall6(trap, a1, a2, a3, 0, 0, 0)
		if errno != 0 {
			return errno
		}
		return nil
	}
	if err := all(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return nil, fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := all(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && !errors.Is(err, syscall.EINVAL) {
		return nil, fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Shrinking the bounding set needs CAP_SETPCAP, still effective here.
	if have.effective&(1<<capSetpcap) != 0 {
		for c := capability(0); c <= lastCap(); c++ {
			if mask&(1<<c) != 0 {
				continue
			}
			if err := all(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
				return nil, fmt.Errorf("drop %v from the bounding set: %w", c, err)
			}
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(mask), Permitted: uint32(mask)},
		{Effective: uint32(mask >> 32), Permitted: uint32(mask >> 32)},
	}
	// Called directly so the pointers stay valid through the call.
	if _, _, errno := psx.Syscall6(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0, 0, 0, 0); errno != 0 {
		return nil, fmt.Errorf("set capabilities: %w", errno)
	}
	// Verify on every thread: a thread the drop missed would keep all.
	if err := checkAllThreads(mask); err != nil {
		return nil, err
	}
	return kept, nil
}

type capSets struct{ effective, permitted uint64 }

func threadCaps() (capSets, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return capSets{}, fmt.Errorf("read capabilities: %w", err)
	}
	return capSets{
		effective: uint64(data[0].Effective) | uint64(data[1].Effective)<<32,
		permitted: uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32,
	}, nil
}

// checkAllThreads reads CapEff and CapPrm of every thread of the process.
func checkAllThreads(want uint64) error {
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("list threads: %v", err)
	}
	for _, st := range tasks {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || (k != "CapEff" && k != "CapPrm") {
				continue
			}
			got, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return fmt.Errorf("parse %s of %s: %w", k, st, err)
			}
			if got&^want != 0 {
				return fmt.Errorf("thread %s still has %s %#x after the drop (want at most %#x)", filepath.Base(filepath.Dir(st)), k, got, want)
			}
		}
	}
	return nil
}
