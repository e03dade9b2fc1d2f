package jvm

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fakeProc writes pid's stat, with start as its start time (field 22),
// and a maps line for each of libs; no stat when start is empty.
func fakeProc(t *testing.T, root string, pid int, start string, libs ...string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "stat"))
	if start != "" {
		// Fields 3 to 21 after "(comm)", then the start time.
		stat := fmt.Sprintf("%d (sh) S 1 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 %s 1 1\n", pid, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var maps string
	for i, l := range libs {
		maps += fmt.Sprintf("%x-%x r-xp 00000000 fe:01 %d %s\n", 0x400000+i*0x10000, 0x401000+i*0x10000, 10+i, l)
	}
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPerfMapperNoticesNewImages: told of execs and new processes
// (Told), the mapper keeps what it learnt of a pid without reading its
// start time again, until Forget: a shell that execs java is a JVM from
// then on. Not told, it notices a reused pid by its start time.
func TestPerfMapperNoticesNewImages(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 100, "5000", "/bin/sh")
	told := NewPerfMapper(PerfMapOptions{ProcRoot: root, Told: true})
	if told.IsJVM(100) {
		t.Fatal("sh taken for a JVM")
	}
	fakeProc(t, root, 100, "", "/bin/java", "/usr/lib/jvm/lib/server/libjvm.so") // exec'd java; no stat to read
	if told.IsJVM(100) {
		t.Error("told: the pid's state was not kept until Forget")
	}
	told.Forget(100) // the exec event
	if !told.IsJVM(100) {
		t.Error("told: after Forget, the JVM the pid exec'd is not noticed")
	}

	fakeProc(t, root, 200, "6000", "/bin/sh")
	polled := NewPerfMapper(PerfMapOptions{ProcRoot: root})
	if polled.IsJVM(200) {
		t.Fatal("sh taken for a JVM")
	}
	fakeProc(t, root, 200, "7000", "/bin/java", "/usr/lib/jvm/lib/server/libjvm.so") // a new process took the pid
	if !polled.IsJVM(200) {
		t.Error("not told: a JVM that took the pid (another start time) is not noticed")
	}
}
