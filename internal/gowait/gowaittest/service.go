// Package gowaittest builds and runs testdata/gowait/service, the Go
// program whose goroutines wait in spans, for the tests of the packages
// that sample goroutine waits.
package gowaittest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildErr  error
)

// Fixture builds the service once per test binary and returns its path.
func Fixture(t testing.TB) string {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("locate the service fixture: no caller information")
	}
	dir := filepath.Join(filepath.Dir(self), "..", "..", "..", "testdata", "gowait", "service")
	bin := filepath.Join(dir, "..", "build", "service")
	buildOnce.Do(func() {
		cmd := exec.Command("go", "build", "-o", bin, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build service fixture: %w: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// Start runs the fixture with -wait and returns it, once it printed that
// it is ready, with the writer that starts its spans.
func Start(t testing.TB, args ...string) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(Fixture(t), append([]string{"-wait"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("fixture first line %q: %v", line, err)
	}
	return cmd, stdin
}
