// Package e2e runs the spanprof binary against real fixture processes and
// checks what it writes. The tests need root: they load eBPF programs.
package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

var (
	repoRoot string
	binPath  string
	fixtures string
)

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	fixtures = filepath.Join(repoRoot, "testdata", "fixtures", "build")
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped, needs root to load eBPF programs")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "spanprof-e2e")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "spanprof")
	if out, err := exec.Command("go", "build", "-o", binPath, filepath.Join(repoRoot, "cmd", "spanprof")).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spanprof: %v\n%s", err, out)
		os.Exit(1)
	}
	for _, d := range []string{"fixtures", "tracectx"} {
		if out, err := exec.Command("make", "-C", filepath.Join(repoRoot, "testdata", d)).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s fixtures: %v\n%s", d, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF programs")
	}
}

// startFixture runs a fixture and waits for its "ready PID" line.
func startFixture(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	return startProgram(t, filepath.Join(fixtures, name), args...)
}

// startProgram runs a program that announces itself with "ready PID" or
// "pid PID" on its first line of stdout, and waits for that line.
func startProgram(t *testing.T, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "ready ") && !strings.HasPrefix(line, "pid ") {
			err = fmt.Errorf("unexpected first line %q", line)
		}
		ready <- err
		io.Copy(io.Discard, out)
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fixture did not start")
	}
	return cmd
}

// spanprof runs the binary and returns its stderr, failing the test on a
// non-zero exit.
func spanprof(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("spanprof %v: %v\n%s", args, err, out)
	}
	return string(out)
}
