package tracectx

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const goLabelsFixtureDir = "../../testdata/golabels"

// goFixtureToolchains are the Go releases the offsets table covers, one
// patch release each; "local" is the toolchain running the tests. Others
// come through the module proxy (GOTOOLCHAIN); a test skips a release it
// cannot download.
var goFixtureToolchains = []string{"go1.21.13", "go1.22.12", "go1.23.12", "go1.24.11", "go1.25.5", "local"}

// goFixtureBuild says how one fixture binary is built.
type goFixtureBuild struct {
	toolchain string
	pkg       string // directory under testdata/golabels
	stripped  bool   // -ldflags=-s -w: no symtab, no DWARF
	cgo       bool   // -tags cgotls with CGO_ENABLED=1: external linking, C TLS
	goarch    string // GOARCH when not the host's
}

func (b goFixtureBuild) name() string {
	n := b.pkg + "-" + b.toolchain
	if b.cgo {
		n += "-cgo"
	}
	if b.stripped {
		n += "-stripped"
	}
	if b.goarch != "" {
		n += "-" + b.goarch
	}
	return n
}

var goFixtureCache sync.Map // name → *goFixtureResult

type goFixtureResult struct {
	once sync.Once
	path string
	skip string
	err  error
}

// buildGoFixture builds b once per test binary into testdata/golabels/build
// and returns its path; it skips when the toolchain cannot be had.
func buildGoFixture(t *testing.T, b goFixtureBuild) string {
	t.Helper()
	v, _ := goFixtureCache.LoadOrStore(b.name(), &goFixtureResult{})
	r := v.(*goFixtureResult)
	r.once.Do(func() {
		env := append(os.Environ(), "GOTOOLCHAIN="+b.toolchain, "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := goCmd(env, "", "version"); err != nil {
			r.skip = fmt.Sprintf("toolchain %s unavailable: %v: %s", b.toolchain, err, out)
			return
		}
		dir, err := filepath.Abs(filepath.Join(goLabelsFixtureDir, b.pkg))
		if err != nil {
			r.err = err
			return
		}
		r.path = filepath.Join(dir, "..", "build", b.name())
		args := []string{"build", "-o", r.path}
		if b.stripped {
			args = append(args, "-ldflags=-s -w")
		}
		if b.goarch != "" {
			env = append(env, "GOARCH="+b.goarch)
		}
		if b.cgo {
			if _, err := exec.LookPath("gcc"); err != nil {
				r.skip = "cgo fixture needs gcc"
				return
			}
			env = append(env, "CGO_ENABLED=1")
			args = append(args, "-tags", "cgotls")
		} else {
			env = append(env, "CGO_ENABLED=0")
		}
		if out, err := goCmd(env, dir, append(args, ".")...); err != nil {
			r.err = fmt.Errorf("build %s: %w: %s", b.name(), err, out)
		}
	})
	if r.skip != "" {
		t.Skip(r.skip)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

func goCmd(env []string, dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Env, cmd.Dir = env, dir
	return cmd.CombinedOutput()
}

// labelsWorker is one "tid trace_id span_id span_name" line of the labels
// fixture.
type labelsWorker struct {
	tid    int
	labels map[string]string
}

// startLabelsFixture runs the labels fixture and returns its pid and
// workers once it printed "ready"; it kills the process at cleanup. With
// park, the workers block instead of spinning.
func startLabelsFixture(t *testing.T, bin string, workers, extra int, park bool) (int, []labelsWorker) {
	t.Helper()
	args := []string{"-workers", strconv.Itoa(workers), "-extra", strconv.Itoa(extra)}
	if park {
		args = append(args, "-park")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ws []labelsWorker
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before ready", bin)
			}
			if line == "ready" {
				return cmd.Process.Pid, ws
			}
			f := strings.Fields(line)
			tid, err := strconv.Atoi(f[0])
			if err != nil || len(f) != 4 {
				t.Fatalf("bad fixture line %q", line)
			}
			l := map[string]string{"trace_id": f[1], "span_id": f[2], "span_name": f[3]}
			for i := 0; i < extra; i++ {
				l[fmt.Sprintf("extra%02d", i)] = fmt.Sprintf("v%d", i)
			}
			ws = append(ws, labelsWorker{tid: tid, labels: l})
		case <-timeout:
			t.Fatalf("%s not ready after 30s", bin)
		}
	}
}
