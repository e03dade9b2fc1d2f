package tracectx

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

const fixtureDir = "../../testdata/tracectx"

// fixturesMissing says why the C fixtures are not built ("" when they are).
var fixturesMissing string

// muslMissing says why the musl fixtures are not built ("" when they are).
var muslMissing string

// TestMain builds the C fixtures once: `go test ./...` works on a clean
// checkout with gcc and clang-19 installed.
func TestMain(m *testing.M) {
	fixturesMissing = testutil.MissingTool("make", "gcc", "g++", "clang-19", "clang++-19")
	if fixturesMissing == "" {
		testutil.MustBuildFixtures("tracectx")
	}
	if m := testutil.MissingTool("musl-gcc"); m != "" {
		muslMissing = m + " (Debian package musl-tools)"
	} else if fixturesMissing == "" {
		testutil.MustBuildFixtures("tracectx", "musl")
	}
	os.Exit(m.Run())
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	if fixturesMissing != "" {
		t.Skipf("C fixtures not built: %s", fixturesMissing)
	}
	p, err := filepath.Abs(filepath.Join(fixtureDir, "build", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// probeThread is one "thread" line of tlsprobe.
type probeThread struct {
	tid         int
	tp, addr    uint64
	trace, span string
}

type probe struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	threads []probeThread
}

// startProbe runs a tlsprobe binary and waits for its "ready" line.
func startProbe(t *testing.T, env []string, bin string, args ...string) *probe {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &probe{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before ready", bin)
			}
			if line == "ready" {
				return p
			}
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "thread" {
				t.Fatalf("unexpected probe line %q", line)
			}
			var th probeThread
			var errs [3]error
			th.tid, errs[0] = strconv.Atoi(f[1])
			th.tp, errs[1] = strconv.ParseUint(f[2], 16, 64)
			th.addr, errs[2] = strconv.ParseUint(f[3], 16, 64)
			for _, err := range errs {
				if err != nil {
					t.Fatalf("parse probe line %q: %v", line, err)
				}
			}
			th.trace, th.span = f[4], f[5]
			p.threads = append(p.threads, th)
		case <-timeout:
			t.Fatalf("%s: no ready line in 10s", bin)
		}
	}
}

func openMem(t *testing.T, pid int) *os.File {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
