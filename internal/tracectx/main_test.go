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
)

const fixtureDir = "../../testdata/tracectx"

// fixturesMissing says why the C fixtures are not built ("" when they are).
var fixturesMissing string

// muslMissing says why the musl fixtures are not built ("" when they are).
var muslMissing string

// TestMain builds the C fixtures once: `go test ./...` works on a clean
// checkout with gcc and clang-19 installed.
func TestMain(m *testing.M) {
	for _, tool := range []string{"make", "gcc", "g++", "clang-19", "clang++-19"} {
		if _, err := exec.LookPath(tool); err != nil {
			fixturesMissing = tool + " not installed"
		}
	}
	if fixturesMissing == "" {
		cmd := exec.Command("make", "-s", "-C", fixtureDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build fixtures: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		muslMissing = "musl-gcc not installed (Debian package musl-tools)"
	} else if fixturesMissing == "" {
		cmd := exec.Command("make", "-s", "-C", fixtureDir, "musl")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build musl fixtures: %v\n%s", err, out)
			os.Exit(1)
		}
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

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("reading another process's memory needs root")
	}
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
