package jvm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/jvm/jvmtest"
)

// startHot starts testdata/Hot.java with extra JVM flags (jvmtest).
func startHot(t *testing.T, dir string, args []string, flags ...string) *exec.Cmd {
	t.Helper()
	return jvmtest.Start(t, jvmtest.Options{Dir: dir, Flags: flags}, args...)
}

func perfMapPath(pid int) string {
	return filepath.Join("/proc", strconv.Itoa(pid), "root", "tmp", "perf-"+strconv.Itoa(pid)+".map")
}

func TestAttachPerfMap(t *testing.T) {
	cmd := startHot(t, t.TempDir(), []string{"2"}, "-XX:+PreserveFramePointer")
	pid := cmd.Process.Pid
	path := perfMapPath(pid)
	os.Remove(path)
	t.Cleanup(func() { os.Remove(path) })
	m := NewPerfMapper(PerfMapOptions{MinInterval: time.Hour})
	if !m.IsJVM(uint32(pid)) {
		t.Fatalf("pid %d maps libjvm.so but IsJVM says no", pid)
	}
	if !m.Refresh(uint32(pid)) {
		t.Fatalf("refresh failed: %+v", m.Stats())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("jvm wrote no perf map: %v", err)
	}
	text := string(b)
	for _, want := range []string{" Hot.work(long)\n", " Interpreter\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("perf map has no %q entry (%d bytes)", want, len(b))
		}
	}
	// A second request within MinInterval is refused and counted.
	if m.Refresh(uint32(pid)) {
		t.Error("second refresh within MinInterval attached again")
	}
	st := m.Stats()
	if st.Attaches != 1 || st.Skipped != 1 || st.Failures != 0 {
		t.Errorf("stats %+v, want 1 attach, 1 skipped, 0 failures", st)
	}
	t.Logf("attach + Compiler.perfmap took %v; map has %d lines", st.Time, strings.Count(text, "\n"))
}
