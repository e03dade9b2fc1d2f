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
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

var (
	repoRoot string
	binPath  string
	fixtures string
	// muslMissing says why the musl fixtures are not built ("" when they are).
	muslMissing string
)

func TestMain(m *testing.M) {
	repoRoot = testutil.RepoRoot()
	fixtures = filepath.Join(repoRoot, "testdata", "fixtures", "build")
	if !testutil.IsRoot() {
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
	testutil.MustBuildFixtures("fixtures")
	testutil.MustBuildFixtures("tracectx")
	if m := testutil.MissingTool("musl-gcc"); m != "" {
		muslMissing = m + " (Debian package musl-tools)"
	} else {
		testutil.MustBuildFixtures("tracectx", "musl")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
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
	return startProgramEnv(t, nil, path, args...)
}

// startProgramEnv is startProgram with env added to the environment.
func startProgramEnv(t *testing.T, env []string, path string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
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

// recordGated runs fix, a fixture that announces itself ("ready PID" or
// "pid PID") and then waits for "go" on stdin before its timed work. It
// starts `spanprof record --pid FIX ARGS...` and says "go" only once
// spanprof is recording, so all of the fixture's work lies inside the
// recording. It waits for both and returns spanprof's stderr.
func recordGated(t *testing.T, fix *exec.Cmd, args ...string) string {
	t.Helper()
	stdin, err := fix.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fixOut, err := fix.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	fix.Stderr = os.Stderr
	if err := fix.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fix.Process.Kill(); fix.Wait() })
	line, err := bufio.NewReader(fixOut).ReadString('\n')
	if err != nil || !(strings.HasPrefix(line, "ready ") || strings.HasPrefix(line, "pid ")) {
		t.Fatalf("fixture first line %q: %v", line, err)
	}
	go io.Copy(io.Discard, fixOut)

	rec := exec.Command(binPath, append([]string{"record", "--pid", fmt.Sprint(fix.Process.Pid)}, args...)...)
	stderr, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Process.Kill(); rec.Wait() })
	var log strings.Builder
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "spanprof: recording") {
			break
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatalf("start the fixture's work: %v\n%s", err, log.String())
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
	}()
	if err := fix.Wait(); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	<-logged // spanprof closed its stderr: the log is complete
	if err := rec.Wait(); err != nil {
		t.Fatalf("spanprof record: %v\n%s", err, log.String())
	}
	return log.String()
}
