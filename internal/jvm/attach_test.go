package jvm

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startHot starts testdata/Hot.java on a real JVM with extra JVM flags
// and waits for its workers. Hot.work and Hot.late are kept from being
// inlined into their loop (CompileCommand=dontinline) so that samples
// in them are theirs, not their caller's.
func startHot(t *testing.T, dir string, args []string, flags ...string) *exec.Cmd {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Skip("no java on PATH")
	}
	src, err := filepath.Abs("testdata/Hot.java")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,Hot::work",
		"-XX:CompileCommand=dontinline,Hot::late"}, flags...)
	argv = append(argv, src)
	argv = append(argv, args...)
	cmd := exec.Command(java, argv...)
	cmd.Dir = dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("java exited before its workers ran")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("java workers not ready after 60s")
	}
	return cmd
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
	// Let the JIT compile Hot.work first.
	time.Sleep(2 * time.Second)
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
