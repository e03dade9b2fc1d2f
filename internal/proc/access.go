package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNotProcess is returned by Resolve for an id that is neither a process
// nor a thread.
var ErrNotProcess = errors.New("no such process")

// Resolve returns the process (thread group) of id, which may be a thread
// id: /proc/TID exists for every thread though /proc lists only
// processes, and a thread's samples carry its process's pid.
func Resolve(procRoot string, id int) (pid int, err error) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(id), "status"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("process %d does not exist: %w", id, ErrNotProcess)
	}
	if err != nil {
		return 0, fmt.Errorf("read process %d: %w", id, err)
	}
	v, ok := statusField(string(data), "Tgid")
	if !ok {
		return 0, fmt.Errorf("read process %d: no Tgid in status", id)
	}
	return strconv.Atoi(v)
}

// CheckReadable returns nil when this process may read pid's memory map,
// else an error that says why not. Reading /proc/PID/maps passes the
// kernel's ptrace access check, which even root fails for a process
// holding capabilities root lacks (in a container whose bounding set is
// smaller than the host's init's) or when an LSM or Yama forbids it.
func CheckReadable(procRoot string, pid int) error {
	f, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err == nil {
		f.Close()
		return nil
	}
	if !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("read process %d: %w", pid, err)
	}
	name := Comm(procRoot, pid)
	if os.Geteuid() != 0 {
		return fmt.Errorf("cannot read process %d (%s): permission denied: run as root or as its user", pid, name)
	}
	if extra := capsBeyondOurs(procRoot, pid); extra != "" {
		return fmt.Errorf("cannot read process %d (%s): permission denied: it holds capabilities spanprof lacks (%s), which fails the kernel's ptrace access check even for root", pid, name, extra)
	}
	return fmt.Errorf("cannot read process %d (%s): permission denied by the kernel's ptrace access check (Yama ptrace_scope or a security module)", pid, name)
}

// Comm returns the command name of pid, or "?" when it cannot be read.
func Comm(procRoot string, pid int) string {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// capsBeyondOurs names the permitted capabilities of pid that this
// process lacks, as a hex mask, or "" when it lacks none (or cannot tell).
func capsBeyondOurs(procRoot string, pid int) string {
	theirs, ok1 := capPrm(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	ours, ok2 := capPrm(filepath.Join(procRoot, "self", "status"))
	if !ok1 || !ok2 || theirs&^ours == 0 {
		return ""
	}
	var names []string
	for bit := range 64 {
		if theirs&^ours&(1<<bit) == 0 {
			continue
		}
		if n, ok := capNames[bit]; ok {
			names = append(names, n)
		} else {
			names = append(names, "cap "+strconv.Itoa(bit))
		}
	}
	return strings.Join(names, ", ")
}

// capNames names the capabilities a container typically drops.
var capNames = map[int]string{
	21: "CAP_SYS_ADMIN", 24: "CAP_SYS_RESOURCE", 19: "CAP_SYS_PTRACE",
	16: "CAP_SYS_MODULE", 17: "CAP_SYS_RAWIO", 25: "CAP_SYS_TIME",
	27: "CAP_MKNOD", 34: "CAP_WAKE_ALARM", 37: "CAP_AUDIT_READ",
	38: "CAP_PERFMON", 39: "CAP_BPF", 40: "CAP_CHECKPOINT_RESTORE",
}

func capPrm(statusPath string) (uint64, bool) {
	data, err := os.ReadFile(statusPath)
	if err != nil {
		return 0, false
	}
	v, ok := statusField(string(data), "CapPrm")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 16, 64)
	return n, err == nil
}

func statusField(status, key string) (string, bool) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// CPUTime returns the user+system CPU time pid has used, in clock ticks
// (/proc/PID/stat), summed over all its threads.
func CPUTime(procRoot string, pid int) (uint64, bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	// comm may hold spaces and parentheses: the fields start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	return u + s, err1 == nil && err2 == nil
}
