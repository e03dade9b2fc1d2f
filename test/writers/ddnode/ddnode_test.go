// Package ddnode runs a real Node 24 process under dd-trace, whose
// @datadog/pprof addon publishes otel_thread_ctx_nodejs_v1, and checks the
// Node walk (tracectx.ReadNodeContext) against the spans the process writes
// down itself. Needs root (ptrace of a child is enough, /proc/PID/mem too).
package ddnode

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/tracectx"
	"golang.org/x/sys/unix"
)

var build = filepath.Join("testdata", "build")

type span struct {
	TraceID string      `json:"trace_id"`
	SpanID  string      `json:"span_id"`
	Start   string      `json:"start_ns"`
	End     string      `json:"end_ns"`
	CPU     [][2]string `json:"cpu"`
	// MonoToUnix: add to a CLOCK_MONOTONIC time for Unix time.
	MonoToUnix string `json:"mono_to_unix_ns"`
	toUnix     int64
	start      int64
	end        int64
	cpu        [][2]int64
}

// startWorkload starts spanwork.js under Node 24 with the writer on and no
// agent (the trace exporter points at a closed loopback port).
func startWorkload(t *testing.T, spans, burnMs int) (*exec.Cmd, *bufio.Scanner, string) {
	t.Helper()
	node, _ := filepath.Abs(filepath.Join(build, "node_modules", ".bin", "node"))
	if _, err := os.Stat(node); err != nil {
		t.Skipf("Node 24 not installed (make writer-ddnode-deps): %v", err)
	}
	truth := filepath.Join(t.TempDir(), "spans.jsonl")
	script, _ := filepath.Abs(filepath.Join("testdata", "spanwork.js"))
	cmd := exec.Command(node, script, truth, strconv.Itoa(spans), strconv.Itoa(burnMs))
	cmd.Dir, _ = filepath.Abs(build)
	cmd.Env = append(os.Environ(),
		"NODE_PATH="+filepath.Join(cmd.Dir, "node_modules"),
		"DD_TRACE_OTEL_CTX_ENABLED=true",
		"DD_TRACE_AGENT_URL=http://127.0.0.1:9",
		"DD_INSTRUMENTATION_TELEMETRY_ENABLED=false",
		"DD_REMOTE_CONFIGURATION_ENABLED=false",
		"DD_TRACE_STARTUP_LOGS=false",
		"DD_SERVICE=ddnode-spanwork",
	)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("workload did not get ready: %q", sc.Text())
	}
	return cmd, sc, truth
}

// addon finds the @datadog/pprof addon in pid's maps: its path, load bias
// and mapped range.
func addon(t *testing.T, pid int) (path string, bias, lo, hi uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.Contains(f[5], "dd_pprof") {
			continue
		}
		r := strings.SplitN(f[0], "-", 2)
		s, _ := strconv.ParseUint(r[0], 16, 64)
		e, _ := strconv.ParseUint(r[1], 16, 64)
		off, _ := strconv.ParseUint(f[2], 16, 64)
		if path == "" {
			path, lo = f[5], s
		}
		if off == 0 && bias == 0 {
			bias = s // first PT_LOAD of the addon is at vaddr 0
		}
		if e > hi {
			hi = e
		}
	}
	if path == "" {
		t.Fatalf("no dd_pprof addon mapped in %d", pid)
	}
	return path, bias, lo, hi
}

type sample struct {
	// at..until holds the moment the thread stopped: before the attach,
	// after the stop was seen.
	at, until int64
	ctx       tracectx.Context
	ok        bool
	err       error
}

// sampleStopped stops thread tid, reads its thread pointer and walks its
// context, then lets it go on.
func sampleStopped(mem *os.File, tid int, loc tracectx.Location, lay tracectx.NodeLayout) sample {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	at := ts.Nano()
	if err := unix.PtraceAttach(tid); err != nil {
		return sample{err: err}
	}
	defer unix.PtraceDetach(tid)
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return sample{err: err}
	}
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	s := sample{at: at, until: ts.Nano()}
	tp, err := tracectx.ThreadPointer(tid)
	if err != nil {
		s.err = err
		return s
	}
	disc, err := loc.Address(mem, tp)
	if err != nil {
		s.err = err
		return s
	}
	s.ctx, s.ok, s.err = tracectx.ReadNodeContext(mem, disc, lay)
	return s
}

func readTruth(t *testing.T, path string) []span {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []span
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s span
		if err := json.Unmarshal([]byte(l), &s); err != nil {
			t.Fatalf("truth line %q: %v", l, err)
		}
		s.start, _ = strconv.ParseInt(s.Start, 10, 64)
		s.end, _ = strconv.ParseInt(s.End, 10, 64)
		s.toUnix, _ = strconv.ParseInt(s.MonoToUnix, 10, 64)
		for _, c := range s.CPU {
			a, _ := strconv.ParseInt(c[0], 10, 64)
			b, _ := strconv.ParseInt(c[1], 10, 64)
			s.cpu = append(s.cpu, [2]int64{a, b})
		}
		out = append(out, s)
	}
	return out
}

// TestNodeWalkAgainstTracer: every stop while a span's code runs on CPU (by
// the workload's own clock) reads that span's ids; every stop outside all
// spans reads none, and no walk fails. A stop while a span waits on its
// await is not judged: none of the span's code runs then.
func TestNodeWalkAgainstTracer(t *testing.T) {
	testutil.RequireRoot(t, "needs root")
	cmd, sc, truthPath := startWorkload(t, 20, 60)
	pid := cmd.Process.Pid
	path, bias, _, _ := addon(t, pid)
	v, err := tracectx.FindNodeDiscovery(fmt.Sprintf("/proc/%d/root%s", pid, path))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	loc, err := tracectx.Resolve(mem, v, bias, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("addon %s bias %#x, discovery at %v", path, bias, loc)
	lay := tracectx.DefaultNodeLayout()

	done := make(chan struct{})
	go func() {
		for sc.Scan() {
		}
		close(done)
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var samples []sample
loop:
	for {
		select {
		case <-done:
			break loop
		default:
		}
		s := sampleStopped(mem, pid, loc, lay)
		if s.err == syscall.ESRCH || s.err == syscall.EPERM {
			// The workload is exiting: it is judged on what was read before.
			<-done
			break loop
		}
		samples = append(samples, s)
		time.Sleep(3 * time.Millisecond)
	}
	_ = cmd.Wait()
	truth := readTruth(t, truthPath)
	if len(truth) != 20 {
		t.Fatalf("workload wrote %d spans, want 20", len(truth))
	}
	const margin = 2e6 // a stop this close to a span edge is not judged
	var in, inMatch, out, outAny, errs, edge int
	for _, s := range samples {
		if s.err != nil {
			// A walk while the isolate is set up or torn down may meet
			// freed handles (V8 zaps them): counted, not judged.
			if s.at >= truth[0].start && s.until <= truth[len(truth)-1].end {
				errs++
			}
			t.Logf("walk error at %d (spans %d..%d): %v", s.at, truth[0].start, truth[len(truth)-1].end, s.err)
			continue
		}
		var cur *span
		near, waiting := false, false
		for i := range truth {
			sp := &truth[i]
			if s.until > sp.start-margin && s.at < sp.end+margin {
				waiting = true // in the span, or too near its edge to judge
			}
			for _, c := range sp.cpu {
				if s.at >= c[0]+margin && s.until <= c[1]-margin {
					cur = sp
				}
			}
		}
		if cur == nil && waiting {
			near = true
		}
		switch {
		case cur != nil:
			in++
			if s.ok && hex.EncodeToString(s.ctx.TraceID[:]) == cur.TraceID && hex.EncodeToString(s.ctx.SpanID[:]) == cur.SpanID {
				inMatch++
			} else if in-inMatch < 5 {
				t.Logf("in span %s/%s at %d: read ok=%v %x/%x", cur.TraceID, cur.SpanID, s.at, s.ok, s.ctx.TraceID, s.ctx.SpanID)
			}
		case near:
			edge++
		default:
			if s.at < truth[0].start-margin {
				continue // before the first work span (warmup)
			}
			out++
			if s.ok {
				outAny++
				t.Logf("outside spans at %d: read %x/%x", s.at, s.ctx.TraceID, s.ctx.SpanID)
			}
		}
	}
	t.Logf("%d stops: %d in spans (%d with the span's ids), %d outside (%d with ids), %d waiting in a span or at an edge (not judged), %d walk errors while spans ran",
		len(samples), in, inMatch, out, outAny, edge, errs)
	if in < 50 || out < 10 {
		t.Fatalf("too few stops to judge: %d in, %d out", in, out)
	}
	if errs != 0 {
		t.Errorf("%d walks failed", errs)
	}
	if float64(inMatch) < 0.99*float64(in) {
		t.Errorf("%d of %d in-span stops carry the span's ids (< 99%%)", inMatch, in)
	}
	if outAny != 0 {
		t.Errorf("%d stops outside spans read a context", outAny)
	}
}
