package tracectx

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spanprof/spanprof/internal/testutil"
)

type workload struct {
	pid   int
	cmd   *exec.Cmd
	truth string
}

// truthSpan is one line of the workload's ground truth.
type truthSpan struct {
	tid         int
	trace, span string
	start, end  int64
	function    string
	// held..released: the context was published all that time.
	held, released int64
}

func startWorkload(t *testing.T, bin string, threads int, seconds float64) *workload {
	t.Helper()
	truth := filepath.Join(t.TempDir(), "truth.txt")
	cmd := exec.Command(bin, truth, strconv.FormatFloat(seconds, 'f', -1, 64), strconv.Itoa(threads))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "pid ") {
		t.Fatalf("workload did not print its pid: %q", sc.Text())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// Give the threads time to start.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", cmd.Process.Pid)); len(ents) > threads {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &workload{pid: cmd.Process.Pid, cmd: cmd, truth: truth}
}

// wait lets the workload finish and parses its ground truth.
func (w *workload) wait(t *testing.T) []truthSpan {
	t.Helper()
	if err := w.cmd.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	b, err := os.ReadFile(w.truth)
	if err != nil {
		t.Fatal(err)
	}
	var out []truthSpan
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 8 || len(f[1]) != 32 || len(f[2]) != 16 {
			t.Fatalf("bad truth line %q", line)
		}
		var s truthSpan
		var errs [5]error
		s.tid, errs[0] = strconv.Atoi(f[0])
		s.start, errs[1] = strconv.ParseInt(f[3], 10, 64)
		s.end, errs[2] = strconv.ParseInt(f[4], 10, 64)
		s.held, errs[3] = strconv.ParseInt(f[6], 10, 64)
		s.released, errs[4] = strconv.ParseInt(f[7], 10, 64)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("bad truth line %q: %v", line, err)
			}
		}
		s.trace, s.span, s.function = f[1], f[2], f[5]
		out = append(out, s)
	}
	return out
}

func workloadTids(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != pid {
			tids = append(tids, tid)
		}
	}
	return tids
}

// threadSample is the context of one thread, stopped by ptrace at some
// moment in [before, after].
type threadSample struct {
	tid           int
	before, after int64
	ok            bool
	c             Context
}

// sampleThread stops tid with PTRACE_INTERRUPT, takes its fsbase from the
// registers and reads the context the way the eBPF program will.
func sampleThread(mem *os.File, tid int, loc Location) (threadSample, error) {
	s := threadSample{tid: tid}
	if err := unix.PtraceSeize(tid); err != nil {
		return s, fmt.Errorf("seize %d: %w", tid, err)
	}
	defer unix.PtraceDetach(tid)
	s.before = time.Now().UnixNano()
	if err := unix.PtraceInterrupt(tid); err != nil {
		return s, fmt.Errorf("interrupt %d: %w", tid, err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return s, fmt.Errorf("wait %d: %w", tid, err)
	}
	s.after = time.Now().UnixNano()
	tp, err := ThreadPointer(tid)
	if err != nil {
		return s, err
	}
	c, ok, err := ReadThreadContext(mem, tp, loc)
	s.c, s.ok = c, ok
	return s, err
}

// TestWorkloadCorrelation samples running workload threads with ptrace and
// checks every context read against the workload's ground truth: the
// user-space model of what the eBPF sampler must achieve.
func TestWorkloadCorrelation(t *testing.T) {
	testutil.RequireRoot(t, "reading another process's memory needs root")
	tests := []struct {
		name, bin string
		kind      LocationKind
	}{
		{"gcc executable", "workload-gcc", LocationStaticTP},
		{"clang executable", "workload-clang", LocationStaticTP},
		{"TLSDESC library", "workload-lib", LocationStaticTP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const threads = 3
			// Runs until SIGTERM; 60 s is only a safety net.
			w := startWorkload(t, fixture(t, tt.bin), threads, 60)
			info, err := Scan(w.pid)
			if err != nil {
				t.Fatal(err)
			}
			if info.ThreadContext.Kind != tt.kind || len(info.Errors) > 0 {
				t.Fatalf("location %+v errors %v", info.ThreadContext, info.Errors)
			}
			if info.ServiceName != "spanprof-workload" {
				t.Errorf("service name %q", info.ServiceName)
			}
			tids := workloadTids(t, w.pid)
			if len(tids) != threads {
				t.Fatalf("tids %v, want %d", tids, threads)
			}
			mem := openMem(t, w.pid)
			runtime.LockOSThread() // ptrace requests come from the attaching thread
			var samples []threadSample
			// Enough stops to see spans and gaps; a loaded machine makes
			// each stop slow, so count samples rather than time.
			start := time.Now()
		sampling:
			for len(samples) < 60 || time.Since(start) < time.Second {
				if time.Since(start) > 30*time.Second {
					break
				}
				for _, tid := range tids {
					s, err := sampleThread(mem, tid, info.ThreadContext)
					if errors.Is(err, unix.ESRCH) {
						t.Logf("stop sampling: %v", err)
						break sampling // the workload ended early: the machine is slow
					}
					if err != nil {
						runtime.UnlockOSThread()
						t.Fatal(err)
					}
					samples = append(samples, s)
				}
				time.Sleep(20 * time.Millisecond) // let the threads run between stops
			}
			runtime.UnlockOSThread()
			if err := w.cmd.Process.Signal(unix.SIGTERM); err != nil {
				t.Fatal(err)
			}
			truth := w.wait(t)
			checkSamples(t, samples, truth, tids)
		})
	}
}

func checkSamples(t *testing.T, samples []threadSample, truth []truthSpan, tids []int) {
	t.Helper()
	fns := map[int]string{}
	for _, s := range truth {
		if !slices.Contains(tids, s.tid) {
			t.Fatalf("truth names tid %d, not a workload thread %v", s.tid, tids)
		}
		// No upper bound: a thread stopped by ptrace on a loaded machine
		// keeps its span open longer.
		if d := time.Duration(s.end - s.start); d < 20*time.Millisecond {
			t.Errorf("span %s lasted %v, want >= 20ms", s.span, d)
		}
		if f, ok := fns[s.tid]; ok && f != s.function {
			t.Errorf("tid %d runs %s and %s", s.tid, f, s.function)
		}
		fns[s.tid] = s.function
	}
	inSpan := 0
	const margin = int64(100 * time.Microsecond)
	for _, s := range samples {
		if !s.ok {
			// Stopped while the span's context was published (its
			// held..released, not start..end: a thread preempted between
			// its start stamp and the publication is in neither): the
			// context was missed.
			for _, ts := range truth {
				if ts.tid == s.tid && ts.held+margin < s.before && s.after < ts.released-margin {
					t.Errorf("tid %d stopped in [%d,%d] inside span %s (published %d..%d) but read no context",
						s.tid, s.before, s.after, ts.span, ts.held, ts.released)
				}
			}
			continue
		}
		inSpan++
		trace, span := hex.EncodeToString(s.c.TraceID[:]), hex.EncodeToString(s.c.SpanID[:])
		i := slices.IndexFunc(truth, func(ts truthSpan) bool { return ts.span == span })
		if i < 0 {
			t.Errorf("tid %d: span %s not in ground truth", s.tid, span)
			continue
		}
		ts := truth[i]
		if ts.tid != s.tid || ts.trace != trace || ts.end < s.before || ts.start > s.after {
			t.Errorf("sample tid %d at [%d,%d] read %s/%s; truth tid %d [%d,%d] %s",
				s.tid, s.before, s.after, trace, span, ts.tid, ts.start, ts.end, ts.trace)
		}
	}
	// Spans take 20-60 ms, gaps 1-5 ms, so most stops land in a span; but a
	// stop on a loaded machine outlasts the span's deadline and the thread
	// resumes into a gap, so only demand that spans were seen at all.
	if len(samples) < 10 || inSpan*10 < len(samples)*3 {
		t.Errorf("%d of %d samples in a span, want >= 30%%", inSpan, len(samples))
	}
	t.Logf("%d samples, %d in a span, %d spans", len(samples), inSpan, len(truth))
}
