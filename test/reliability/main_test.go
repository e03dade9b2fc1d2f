// Package reliability runs spanprof against process churn, overload and
// faults, and checks that nothing is lost silently. The tests need root:
// they load eBPF programs. Long modes are behind SPANPROF_RELIABILITY_LONG
// (a minute of churn instead of 20 s); `make soak` runs the agent for ten
// minutes (bench/soak.sh). SPANPROF_BIN tests a given binary instead of
// building the checkout's.
package reliability

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/spanprof/spanprof/internal/testutil"
)

var (
	repoRoot string
	binPath  string
	fixtures string
)

func TestMain(m *testing.M) {
	repoRoot = testutil.RepoRoot()
	fixtures = filepath.Join(repoRoot, "testdata", "reliability", "build")
	if !testutil.IsRoot() {
		fmt.Println("reliability: privileged tests skip, they need root to load eBPF programs")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "spanprof-reliability")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "spanprof")
	if bin := os.Getenv("SPANPROF_BIN"); bin != "" {
		// Test a given build (a candidate fix) instead of the checkout's.
		binPath = bin
	} else if out, err := exec.Command("go", "build", "-o", binPath, filepath.Join(repoRoot, "cmd", "spanprof")).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spanprof: %v\n%s", err, out)
		os.Exit(1)
	}
	testutil.MustBuildFixtures("reliability")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// long reports whether the long modes were asked for.
func long() bool { return os.Getenv("SPANPROF_RELIABILITY_LONG") != "" }

// running is a spanprof process whose stderr is collected.
type running struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
}

// startSpanprof starts spanprof and waits until it says it is recording
// (or, for the agent, until it logged that it started).
func startSpanprof(t *testing.T, ready string, args ...string) *running {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &running{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			r.stderr.WriteLine(sc.Text())
			if !once && strings.Contains(sc.Text(), ready) {
				once = true
				close(seen)
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		r.done <- err
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
		}
	})
	select {
	case <-seen:
	case err := <-r.done:
		t.Fatalf("spanprof %v exited before it was ready: %v\n%s", args, err, r.stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("spanprof %v not ready after 60s\n%s", args, r.stderr)
	}
	return r
}

// wait waits for the process and returns its peak RSS in KiB.
func (r *running) wait(t *testing.T) (maxRSSKiB int64) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("spanprof: %v\n%s", err, r.stderr)
		}
	case <-time.After(5 * time.Minute):
		r.cmd.Process.Kill()
		t.Fatalf("spanprof did not exit\n%s", r.stderr)
	}
	return r.cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) WriteLine(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.WriteString(s)
	b.buf.WriteByte('\n')
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// procStatus reads one field (in kB for memory fields) of /proc/PID/status.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// openFDs counts the open file descriptors of pid.
func openFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

func readPprof(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return p
}

// lostComments returns the "lost REASON: N" comments of a pprof profile.
func lostComments(p *profile.Profile) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range p.Comments {
		rest, ok := strings.CutPrefix(c, "lost ")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(rest, ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	return out
}

func label(s *profile.Sample, key string) string {
	if v := s.Label[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
