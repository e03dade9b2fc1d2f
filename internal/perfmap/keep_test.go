package perfmap

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestCacheKeepsRewrittenEntries rewrites a map file the way HotSpot's
// Compiler.perfmap does (the whole code cache, freed code gone): entries
// only the old version had keep their names, and where the new version
// reuses memory the new entry wins.
func TestCacheKeepsRewrittenEntries(t *testing.T) {
	root := t.TempDir()
	const pid = 4243
	path := filepath.Join(root, fmt.Sprint(pid), "root", "tmp", fmt.Sprintf("perf-%d.map", pid))
	os.MkdirAll(filepath.Dir(path), 0o755)
	os.WriteFile(path, []byte("1000 100 long Hot.work(long) tier1\n3000 100 freed_later\n"), 0o644)
	c := New(Options{ProcRoot: root})
	c.Load(pid)
	os.WriteFile(path, []byte("1000 80 reused\n5000 10 Hot.late\n"), 0o644)
	c.Load(pid)
	tests := []struct {
		addr uint64
		want string
	}{
		{0x1010, "reused"},      // new entry wins where both cover the address
		{0x1090, ""},            // the old entry overlapped a new one: dropped, not guessed
		{0x3010, "freed_later"}, // only the old version had it: kept
		{0x5004, "Hot.late"},
	}
	for _, tt := range tests {
		n, ok := c.lookup(pid, tt.addr)
		if n != tt.want || ok != (tt.want != "") {
			t.Errorf("Lookup(%#x) = %q, %v; want %q", tt.addr, n, ok, tt.want)
		}
	}
	if st := c.Stats(); st.Kept != 1 || st.Reads != 2 {
		t.Errorf("Stats = %+v, want 2 reads and 1 kept entry", st)
	}
}

// TestCacheMissHook: a miss asks the hook, which rewrites the map, and
// the lookup reads it again.
func TestCacheMissHook(t *testing.T) {
	root := t.TempDir()
	const pid = 4244
	path := filepath.Join(root, fmt.Sprint(pid), "root", "tmp", fmt.Sprintf("perf-%d.map", pid))
	os.MkdirAll(filepath.Dir(path), 0o755)
	calls := 0
	c := New(Options{ProcRoot: root, Miss: func(p uint32) bool {
		calls++
		if p != pid {
			return false
		}
		return os.WriteFile(path, []byte("1000 10 compiled_late\n"), 0o644) == nil
	}})
	if n, ok := c.Lookup(pid, 0x1004); !ok || n != "compiled_late" {
		t.Errorf("Lookup = %q, %v; want compiled_late", n, ok)
	}
	if _, ok := c.Lookup(pid, 0x9000); ok || calls != 2 {
		t.Errorf("uncovered address: found %v after %d hook calls, want not found after 2", ok, calls)
	}
}

// TestCacheExitedProcess: a real process writes its map in /tmp and
// exits before any lookup; having been watched while alive, it keeps its
// names.
func TestCacheExitedProcess(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	c := New(Options{})
	c.Watch(pid)
	path := fmt.Sprintf("/tmp/perf-%d.map", pid)
	if err := os.WriteFile(path, []byte("7f0000001000 40 LazyCompile:*hot /app/x.js:3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
		t.Skip("pid reused at once")
	}
	if n, ok := c.Lookup(pid, 0x7f0000001010); !ok || n != "LazyCompile:*hot /app/x.js:3" {
		t.Errorf("after exit Lookup = %q, %v", n, ok)
	}
	// An unwatched process has no such fallback: /tmp/perf-PID.map may
	// be a stale file of an earlier process.
	c2 := New(Options{})
	if n, ok := c2.Lookup(pid, 0x7f0000001010); ok {
		t.Errorf("unwatched exited process named %q", n)
	}
	if st := c.Stats(); st.Exited == 0 {
		t.Errorf("Stats = %+v, want an exited read", st)
	}
	c.Exited(pid)
	c.ForgetExited(time.Now().Add(-time.Minute))
	if _, ok := c.Lookup(pid, 0x7f0000001010); !ok {
		t.Error("ForgetExited for exits before the exit dropped the table")
	}
	c.ForgetExited(time.Now())
	os.Remove(path)
	if _, ok := c.Lookup(pid, 0x7f0000001010); ok {
		t.Error("ForgetExited kept the table")
	}
}

// TestCacheAbsentMapRechecked checks that a process found without a map
// file is not looked at again on every unnamed address, that its file is
// read once the recheck time has passed, and at once when Miss wrote it.
func TestCacheAbsentMapRechecked(t *testing.T) {
	root := t.TempDir()
	const pid, other = 4245, 4246
	path := func(p int) string {
		return filepath.Join(root, fmt.Sprint(p), "root", "tmp", fmt.Sprintf("perf-%d.map", p))
	}
	write := func(p int) {
		os.MkdirAll(filepath.Dir(path(p)), 0o755)
		if err := os.WriteFile(path(p), []byte("1000 100 Late.jit\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missed := false
	c := New(Options{ProcRoot: root, Miss: func(p uint32) bool {
		if p != other || missed {
			return false
		}
		missed = true
		write(other) // as jvm.PerfMapper.Refresh does
		return true
	}})
	if _, ok := c.Lookup(pid, 0x1010); ok {
		t.Fatal("named an address of a process without a map file")
	}
	write(pid)
	if _, ok := c.Lookup(pid, 0x1010); ok {
		t.Errorf("read the map file again within %v of finding none", absentRecheck)
	}
	time.Sleep(absentRecheck + 100*time.Millisecond)
	if name, ok := c.Lookup(pid, 0x1010); !ok || name != "Late.jit" {
		t.Errorf("after %v: %q, %v; want Late.jit", absentRecheck, name, ok)
	}
	if name, ok := c.Lookup(other, 0x1010); !ok || name != "Late.jit" {
		t.Errorf("map file written by Miss: %q, %v; want Late.jit", name, ok)
	}
}
