// Package jvmtest starts the JVM test program (internal/jvm
// testdata/Hot.java) for the tests of the packages that ask JVMs for
// their perf maps.
package jvmtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// Options say how to run Hot.java.
type Options struct {
	Dir   string              // working directory; default the source's, outside /tmp
	Cred  *syscall.Credential // run as another user
	Wrap  []string            // a command that ends by running its arguments (unshare ...)
	Flags []string            // more JVM flags
}

// Start runs Hot.java with the given arguments (THREADS [LATE_AFTER_MS])
// and waits for its workers, and then for C2 to have compiled Hot.work:
// from then on a hot worker runs compiled code, not the interpreter. How
// long that takes depends on the machine's load; the JVM logs its
// compilations to stderr (-Xlog:jit+compilation). It skips the test
// without java. Hot.work and Hot.late are kept out of their callers by
// CompileCommand=dontinline, so a sample in them is theirs. The process
// is killed at cleanup.
func Start(t *testing.T, o Options, args ...string) *exec.Cmd {
	t.Helper()
	testutil.RequireLong(t, "starts a JVM")
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java on PATH")
	}
	src := copySource(t)
	argv := append([]string{"java", "-Xlog:jit+compilation=debug:stderr:tags", "-XX:CompileCommand=quiet",
		"-XX:CompileCommand=dontinline,Hot::work", "-XX:CompileCommand=dontinline,Hot::late"}, o.Flags...)
	argv = append(append(append([]string{}, o.Wrap...), argv...), src)
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = o.Dir
	if cmd.Dir == "" {
		cmd.Dir = filepath.Dir(src)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.Cred}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready, compiled := make(chan bool, 1), make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		ready <- false
	}()
	stderr := &lockedBuffer{} // what the JVM said but its compilation log
	go func() {
		// One send at most: a later recompile of Hot.work must not block
		// this reader, which drains the JVM's stderr until it exits.
		seen := false
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), compileTag)
			if !ok {
				stderr.Write(append(sc.Bytes(), '\n'))
			} else if !seen && c2Compiled(line, "Hot::work") {
				seen = true
				compiled <- true
			}
		}
		if !seen {
			compiled <- false
		}
	}()
	for _, w := range []struct {
		c    chan bool
		what string
	}{{ready, "its workers ran"}, {compiled, "C2 compiled Hot.work"}} {
		select {
		case ok := <-w.c:
			if !ok {
				t.Fatalf("java exited before %s: %s", w.what, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("java: not %s after 60s: %s", w.what, stderr.String())
		}
	}
	return cmd
}

// compileTag starts the lines of -Xlog:jit+compilation=debug:stderr:tags.
const compileTag = "[jit,compilation]"

// c2Compiled says whether a line of the JVM's compilation log (after its
// tag) reports method (Class::name) compiled by C2 (tier 4) as a whole:
// not on stack replacement (%), not made not entrant. Its fields: compile
// id, flag characters (the OSR mark among them), tier, method, size.
func c2Compiled(line, method string) bool {
	if strings.Contains(line, "made not entrant") || strings.Contains(line, "%") {
		return false
	}
	f := strings.Fields(line)
	for i := 1; i < len(f); i++ {
		if f[i] == method {
			return f[i-1] == "4"
		}
	}
	return false
}

// copySource copies testdata/Hot.java into a directory of its own outside
// /tmp, readable by every user: a JVM in a container gets a private /tmp,
// and the checkout itself may lie under /tmp (CI clones anywhere).
func copySource(t *testing.T) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "testdata", "Hot.java"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/var/tmp", "spanprof-hot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "Hot.java")
	if err := os.WriteFile(src, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
