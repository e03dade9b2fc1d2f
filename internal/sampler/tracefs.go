package sampler

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// tracefsPath is where tracefs belongs (Documentation/trace/ftrace.rst).
const tracefsPath = "/sys/kernel/tracing"

// tracefsMounted reports whether tracefs is where cilium/ebpf looks for
// it, the two places it may be mounted.
func tracefsMounted() bool {
	for _, p := range []struct {
		path  string
		magic int64
	}{
		{tracefsPath, unix.TRACEFS_MAGIC},
		{"/sys/kernel/debug/tracing", unix.TRACEFS_MAGIC},
		{"/sys/kernel/debug/tracing", unix.DEBUGFS_MAGIC},
	} {
		var st unix.Statfs_t
		if unix.Statfs(p.path, &st) == nil && int64(st.Type) == p.magic {
			return true
		}
	}
	return false
}

// EnsureTracefs mounts tracefs at /sys/kernel/tracing when it is mounted
// nowhere, as a fresh machine without systemd's mount has it: tracepoint
// attachment (syscalls/sys_enter_exit_group) reads event ids from it.
// It reports whether it mounted it, or why tracefs is missing with what
// to run. The mount stays, as the one systemd makes at boot would.
//
// It must run before the process's first tracepoint attachment:
// cilium/ebpf looks tracefs up once per process.
func EnsureTracefs() (mounted bool, err error) {
	if tracefsMounted() {
		return false, nil
	}
	if err := unix.Mount("tracefs", tracefsPath, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return false, fmt.Errorf("tracefs is not mounted and mounting it failed (%w); as root run: mount -t tracefs tracefs %s", err, tracefsPath)
	}
	return true, nil
}

// exitSeesMM reports whether sched_process_exit fires while the exiting
// task still has its mm: Linux 6.16 moved the tracepoint before
// exit_mm(). An unknown release counts as older, so nothing is hidden.
func exitSeesMM() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	maj, min, ok := parseRelease(unix.ByteSliceToString(u.Release[:]))
	return ok && (maj > 6 || maj == 6 && min >= 16)
}
