package proc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func writeProc(t *testing.T, root, pid, name, content string) {
	t.Helper()
	dir := filepath.Join(root, pid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestResolve: a thread id resolves to its thread group, a process to
// itself, and an id that is neither says so.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "100", "status", "Name:\tsrv\nTgid:\t100\nPid:\t100\n")
	writeProc(t, root, "105", "status", "Name:\tworker\nTgid:\t100\nPid:\t105\n")
	for id, want := range map[int]int{100: 100, 105: 100} {
		if got, err := Resolve(root, id); err != nil || got != want {
			t.Errorf("Resolve(%d) = %d, %v; want %d", id, got, err, want)
		}
	}
	if _, err := Resolve(root, 7); !errors.Is(err, ErrNotProcess) {
		t.Errorf("Resolve(7): %v", err)
	}
	// The real kernel: this test's own threads belong to its process.
	self := os.Getpid()
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		var tid int
		if _, err := fmt.Sscan(e.Name(), &tid); err != nil {
			continue
		}
		if got, err := Resolve("/proc", tid); err != nil || got != self {
			t.Errorf("Resolve(/proc, %d) = %d, %v; want %d", tid, got, err, self)
		}
	}
}

// TestCPUTime: utime and stime are found after a comm holding spaces and
// parentheses.
func TestCPUTime(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, "9", "stat", "9 (a) b (c) S 1 9 9 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 1 0 55 1000 10\n")
	if got, ok := CPUTime(root, 9); !ok || got != 267 {
		t.Errorf("CPUTime = %d, %v; want 267", got, ok)
	}
	if _, ok := CPUTime(root, 10); ok {
		t.Errorf("CPUTime of a missing process succeeded")
	}
}
