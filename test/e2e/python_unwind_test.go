package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

// pyPaths are the Python functions on each thread's call path in
// testdata/python/pystack.py, and the thread's outermost native frames:
// the main thread starts at _start and runs Py_RunMain (its main jumps to
// Py_BytesMain, so main itself leaves no frame), the worker at clone3 and
// start_thread.
var pyPaths = map[string]struct{ funcs, entry []string }{
	"main":      {[]string{"main_loop", "main_middle", "main_inner"}, []string{"_start", "Py_RunMain"}},
	"py-worker": {[]string{"worker", "hot_loop", "middle", "inner"}, []string{"clone3", "start_thread"}},
}

// wantPyShare is the share of a thread's on-CPU samples each function of
// its path and its entry must be on.
const wantPyShare = 95.0

// pyTally counts one thread's on-CPU samples and those with each frame.
type pyTally struct {
	samples int
	with    map[string]int // a function of the path, or "entry" (all of its entry frames)
}

func (p *pyTally) add(n int, frames []string, funcs, entry []string) {
	if p.with == nil {
		p.with = map[string]int{}
	}
	p.samples += n
	for _, fn := range funcs {
		if hasPyFunc(frames, fn) {
			p.with[fn] += n
		}
	}
	all := true
	for _, e := range entry {
		all = all && hasFunc(frames, e)
	}
	if all {
		p.with["entry"] += n
	}
}

// hasPyFunc reports whether frames hold Python function fn as CPython's
// perf map and jitdump name its trampoline: py::FN:FILE.
func hasPyFunc(frames []string, fn string) bool {
	for _, f := range frames {
		if strings.HasPrefix(f, "py::"+fn+":") {
			return true
		}
	}
	return false
}

// unwindStopsRe reads record's counts of stacks cut, by reason.
var unwindStopsRe = regexp.MustCompile(`stacks cut: (\d+) by the stack window .*?, (\d+) deeper than the window at frameless code, (\d+) at code without unwind information, (\d+) at rules not evaluated, (\d+) at JIT frame links`)

// TestUnwindPython records testdata/python/pystack.py under CPython 3.12
// and 3.13 with their perf trampolines (-X perf: a perf map; 3.13 -X
// perf_jit: a jitdump only), a CPU-bound worker thread and the main
// thread each on a known call path. CPython is built without frame
// pointers and its trampolines keep none: every function of a thread's
// path must be on ≥ 95 % of its samples, and the stack must reach the
// thread's outermost frames as often. perf record --call-graph dwarf runs
// on the same process at the same time, logged for comparison.
func TestUnwindPython(t *testing.T) {
	testutil.RequireRoot(t)
	_, perfErr := exec.LookPath("perf")
	for _, tc := range []struct{ version, mode string }{
		{"3.12.1", "perf"}, {"3.13.0", "perf"}, {"3.13.0", "perf_jit"},
	} {
		t.Run(tc.version+"-"+tc.mode, func(t *testing.T) {
			py := pyenvPython(t, tc.version)
			dir := t.TempDir()
			threads := filepath.Join(dir, "threads")
			// CPython writes its jitdump through a stdio buffer: the
			// entries of the functions it starts running last reach the
			// file at the next 4 KiB of entries or at exit. The perf_jit
			// fixture exits inside the recording, so that its file is
			// whole when the profile is built (names of a process that
			// exited are read from the host's /tmp).
			seconds, exits := "14", tc.mode == "perf_jit"
			if exits {
				seconds = "5"
			}
			fix := startProgram(t, py, "-X", tc.mode, filepath.Join(repoRoot, "testdata", "python", "pystack.py"), seconds, threads)
			pid := fmt.Sprint(fix.Process.Pid)
			t.Cleanup(func() {
				os.Remove("/tmp/perf-" + pid + ".map")
				os.Remove("/tmp/jit-" + pid + ".dump")
			})
			byTID := readPyThreads(t, threads)
			var perfCmd *exec.Cmd
			perfData := filepath.Join(dir, "perf.data")
			if perfErr == nil {
				perfCmd = exec.Command("perf", "record", "-q", "-F", "999", "--call-graph", "dwarf", "-p", pid, "-o", perfData, "--", "sleep", "6")
				if err := perfCmd.Start(); err != nil {
					t.Fatalf("start perf: %v", err)
				}
			}
			out := filepath.Join(dir, "p.otlp.json")
			stderr := spanprof(t, "record", "--pid", pid, "--frequency", "999", "--duration", "6s", "--output", out)
			t.Logf("spanprof: %s", strings.TrimSpace(stderr))
			if err := fix.Process.Signal(syscall.Signal(0)); err != nil && !exits {
				t.Fatalf("the fixture ended before the recording did: %v", err)
			}
			if m := unwindStopsRe.FindStringSubmatch(stderr); m != nil {
				t.Logf("stacks cut: %s by the window, %s deeper than it, %s at code without unwind information, %s at rules not evaluated, %s at JIT frame links", m[1], m[2], m[3], m[4], m[5])
			}
			tallies := map[string]*pyTally{}
			for _, s := range readOTLP(t, out) {
				name := byTID[s.Attrs["thread.id"]]
				if name == "" || s.Kind == "off_cpu" {
					continue
				}
				if tallies[name] == nil {
					tallies[name] = &pyTally{}
				}
				tallies[name].add(len(s.Times), s.Frames, pyPaths[name].funcs, pyPaths[name].entry)
			}
			var ref map[string]*pyTally
			if perfCmd != nil {
				if err := perfCmd.Wait(); err != nil {
					t.Logf("perf record: %v", err)
				}
				ref = perfPython(t, perfData, byTID)
			}
			for _, name := range []string{"main", "py-worker"} {
				c, r := tallies[name], ref[name]
				if c == nil {
					c = &pyTally{}
				}
				if r == nil {
					r = &pyTally{}
				}
				path := pyPaths[name]
				var b strings.Builder
				fmt.Fprintf(&b, "%s %s %s: spanprof %d samples, perf dwarf %d:", tc.version, tc.mode, name, c.samples, r.samples)
				for _, k := range append(append([]string(nil), path.funcs...), "entry") {
					fmt.Fprintf(&b, " %s %.1f%% (perf %.1f%%)", k, share(int64(c.with[k]), int64(c.samples)), share(int64(r.with[k]), int64(r.samples)))
				}
				t.Log(b.String())
				if c.samples < truth.MinOnSamples {
					t.Errorf("%s: %d on-CPU samples, want ≥ %d", name, c.samples, truth.MinOnSamples)
					continue
				}
				for _, fn := range path.funcs {
					if s := share(int64(c.with[fn]), int64(c.samples)); s < wantPyShare {
						t.Errorf("%s: py::%s on %.1f%% of %d samples, want ≥ %.0f%%", name, fn, s, c.samples, wantPyShare)
					}
				}
				if s := share(int64(c.with["entry"]), int64(c.samples)); s < wantPyShare {
					t.Errorf("%s: %v on %.1f%% of %d samples, want ≥ %.0f%%", name, path.entry, s, c.samples, wantPyShare)
				}
			}
		})
	}
}

// readPyThreads reads the fixture's "TID NAME" lines.
func readPyThreads(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	byTID := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		tid, name, ok := strings.Cut(line, " ")
		if _, known := pyPaths[name]; !ok || !known {
			t.Fatalf("threads file line %q", line)
		}
		byTID[tid] = name
	}
	if len(byTID) != len(pyPaths) {
		t.Fatalf("threads file names %d threads, want %d", len(byTID), len(pyPaths))
	}
	return byTID
}

// perfPython tallies `perf script` of a --call-graph dwarf recording by
// thread, as TestUnwindPython tallies spanprof's.
func perfPython(t *testing.T, data string, byTID map[string]string) map[string]*pyTally {
	t.Helper()
	out, err := exec.Command("perf", "script", "-i", data, "-F", "tid,ip,sym").Output()
	if err != nil {
		t.Logf("perf script: %v", err)
		return nil
	}
	tallies := map[string]*pyTally{}
	var tid string
	var frames []string
	flush := func() {
		if name := byTID[tid]; name != "" {
			if tallies[name] == nil {
				tallies[name] = &pyTally{}
			}
			tallies[name].add(1, frames, pyPaths[name].funcs, pyPaths[name].entry)
		}
		tid, frames = "", nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case line[0] != '\t':
			tid = strings.TrimSpace(line)
		default:
			if f := strings.Fields(line); len(f) >= 2 {
				frames = append(frames, f[1])
			}
		}
	}
	flush()
	return tallies
}

// pyenvPython returns the path of pyenv's CPython version v, or skips.
func pyenvPython(t *testing.T, v string) string {
	t.Helper()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	py := filepath.Join(root, "versions", v, "bin", "python3")
	if _, err := os.Stat(py); err != nil {
		t.Skipf("CPython %s not installed at %s (pyenv install %s)", v, py, v)
	}
	return py
}
