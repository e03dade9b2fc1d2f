package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

// hasFunc reports whether frames hold fn, as a C name or a demangled C++
// one ("fn()").
func hasFunc(frames []string, fn string) bool { return truth.HasFunc(frames, fn) }

// perfDwarf tallies `perf script` of a perf record --call-graph dwarf
// recording by thread name, on-CPU only.
func perfDwarf(t *testing.T, data string, byTID map[string]string) map[string]*truth.CaseTally {
	t.Helper()
	out, err := exec.Command("perf", "script", "-i", data, "-F", "tid,ip,sym").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	tallies := map[string]*truth.CaseTally{}
	var tid string
	var frames []string
	flush := func() {
		if name := byTID[tid]; name != "" {
			if tallies[name] == nil {
				tallies[name] = &truth.CaseTally{}
			}
			tallies[name].Add(false, 1, 1, frames, truth.UnwindCases[name])
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
			f := strings.Fields(line)
			if len(f) >= 2 {
				frames = append(frames, f[1])
			} else if len(f) == 1 {
				frames = append(frames, f[0])
			}
		}
	}
	flush()
	return tallies
}

// TestUnwindThroughLibraries records the fixture's threads on- and
// off-CPU: each case function must be on ≥ 99 % of its thread's samples
// and blocked time, and the stack must reach start_thread as often,
// through glibc and libstdc++ code without frame pointers. perf record
// --call-graph dwarf runs on the same process at the same time as the
// reference (on-CPU only: its off-CPU mode needs tracefs).
func TestUnwindThroughLibraries(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Fixtures(t, "unwind", nil)
	_, perfErr := exec.LookPath("perf")
	for _, cc := range []string{"gcc", "clang"} {
		t.Run(cc, func(t *testing.T) {
			dir := t.TempDir()
			threads := filepath.Join(dir, "threads")
			fix := startProgram(t, filepath.Join(repoRoot, "testdata", "unwind", "build", "cases-"+cc), "16", threads)
			byTID, err := truth.ReadCaseThreads(threads)
			if err != nil {
				t.Fatal(err)
			}
			pid := fmt.Sprint(fix.Process.Pid)
			var perfCmd *exec.Cmd
			perfData := filepath.Join(dir, "perf.data")
			if perfErr == nil {
				perfCmd = exec.Command("perf", "record", "-q", "-F", "499", "--call-graph", "dwarf", "-p", pid, "-o", perfData, "--", "sleep", "8")
				if err := perfCmd.Start(); err != nil {
					t.Fatalf("start perf: %v", err)
				}
			}
			out := filepath.Join(dir, "p.otlp.json")
			stderr := spanprof(t, "record", "--pid", pid, "--off-cpu", "--frequency", "499", "--duration", "8s", "--output", out)
			t.Logf("spanprof: %s", strings.TrimSpace(stderr))
			if err := fix.Process.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("the fixture ended before the recording did: %v", err)
			}
			windowCuts := truth.WindowCuts(stderr)
			samples := readOTLP(t, out)
			tallies := truth.TallyCases(samples, byTID)
			var ref map[string]*truth.CaseTally
			if perfCmd != nil {
				// perf ends with the fixture at the latest; what it wrote
				// is the reference either way.
				if err := perfCmd.Wait(); err != nil {
					t.Logf("perf record: %v", err)
				}
				ref = perfDwarf(t, perfData, byTID)
			} else {
				t.Logf("no perf: no reference (%v)", perfErr)
			}
			table, failures := truth.JudgeCases(cc, tallies, ref, windowCuts)
			for _, f := range failures {
				t.Error(f)
			}
			// The stacks that miss their case's function: all of them with
			// -v, those of a failed case otherwise.
			for _, s := range samples {
				name := byTID[s.Attrs["thread.id"]]
				if name == "" || hasFunc(s.Frames, truth.UnwindCases[name]) {
					continue
				}
				if testing.Verbose() || slices.ContainsFunc(failures, func(f string) bool { return strings.HasPrefix(f, name+":") }) {
					t.Logf("%s %s without %s: %v", name, s.Kind, truth.UnwindCases[name], s.Frames)
				}
			}
			t.Log(table)
		})
	}
}

func share(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
