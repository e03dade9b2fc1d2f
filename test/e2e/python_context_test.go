package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/test/truth"
)

// pythonVersions are the CPython versions sdk/python supports, as pyenv
// names them (the Makefile's PY_VERSIONS).
var pythonVersions = []string{"3.11.7", "3.12.1", "3.13.0"}

// pyenvRoot is PYENV_ROOT, else ~/.pyenv.
func pyenvRoot() string {
	if r := os.Getenv("PYENV_ROOT"); r != "" {
		return r
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".pyenv")
}

// TestCorrelationPython runs testdata/python/spanwork.py, real OpenTelemetry
// SDK spans on three threads (nested, with work between them) and on an
// asyncio loop (interleaved tasks, each in its own span, CPU bursts between
// awaits), with OTEL_PYTHON_CONTEXT=spanprof (sdk/python), under each
// CPython, once with the SDK set up in code and once under
// opentelemetry-instrument with the API alone, records it at 999 Hz and
// judges the links against the ground truth the app wrote down. The SDK's
// extension is dlopen'ed by the interpreter while OpenTelemetry loads, as
// in any Python service.
func TestCorrelationPython(t *testing.T) {
	testutil.RequireRoot(t)
	root := pyenvRoot()
	// The venvs (pinned OpenTelemetry, the SDK built from this tree) come
	// from the Makefile, so the test and `make python-sdk-test` share them.
	if _, err := testutil.Make(".", "python-venvs", "PYENV_ROOT="+root); err != nil {
		t.Fatal(err)
	}
	for _, v := range pythonVersions {
		t.Run(v, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(root, "versions", v, "bin", "python3")); err != nil {
				t.Skipf("CPython %s not installed under %s (pyenv install %s): %v", v, root, v, err)
			}
			venv := filepath.Join(repoRoot, "out", "python", v, "venv")
			for _, mode := range []struct {
				name    string
				service string
				cmd     []string
				env     []string
			}{
				{name: "sdk", service: "spanwork-sdk", cmd: []string{filepath.Join(venv, "bin", "python")}, env: nil},
				{name: "instrument", service: "spanwork-instrumented",
					cmd: []string{filepath.Join(venv, "bin", "opentelemetry-instrument"), filepath.Join(venv, "bin", "python")},
					env: []string{"OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none",
						"OTEL_RESOURCE_ATTRIBUTES=service.name=spanwork-instrumented"}},
			} {
				t.Run(mode.name, func(t *testing.T) {
					runPythonSpans(t, v, mode.name, mode.service, mode.cmd, mode.env)
				})
			}
			t.Run("late", func(t *testing.T) { runPythonLate(t, v, filepath.Join(venv, "bin", "python")) })
		})
	}
}

func runPythonSpans(t *testing.T, version, mode, service string, cmd, env []string) {
	dir := t.TempDir()
	truthPath := filepath.Join(dir, "truth")
	args := append(cmd[1:], filepath.Join(repoRoot, "testdata", "python", "spanwork.py"), truthPath)
	if mode == "sdk" {
		args = append(args, "--sdk")
	}
	env = append(env, "OTEL_PYTHON_CONTEXT=spanprof", "OTEL_SERVICE_NAME=")
	fix := startProgramEnv(t, env, cmd[0], args...)
	// The variable is the extension's, found where the interpreter
	// dlopen'ed it.
	info, err := tracectx.Scan(fix.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(filepath.Base(info.ThreadContextModule), "_native") {
		t.Fatalf("thread context in %q (%+v, scan errors %v), want spanprof_otel's _native extension",
			info.ThreadContextModule, info.ThreadContext, info.Errors)
	}
	t.Logf("python %s %s: otel_thread_ctx_v1 in %s, reached as %v", version, mode, filepath.Base(info.ThreadContextModule), info.ThreadContext.Kind)
	out := filepath.Join(dir, "p.otlp.json")
	recStart := time.Now()
	recordBounded(t, 90*time.Second, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "4s", "--output", out)
	fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
	if err := fix.Wait(); err != nil {
		t.Fatalf("spanwork: %v", err)
	}
	var samples []truth.Sample
	for _, s := range readOTLP(t, out) {
		if s.Kind == "samples" {
			samples = append(samples, s)
		}
	}
	names := readSpanNames(t, truthPath+".names")
	label := fmt.Sprintf("python %s %s", version, mode)

	// Linking: from the first sample of the recording to the first linked
	// one (the thread context is found by the recording's first scan when
	// the extension was loaded before it started).
	var first, firstLinked uint64 = 1<<64 - 1, 1<<64 - 1
	for _, s := range samples {
		for _, ts := range s.Times {
			first = min(first, ts)
			if s.Trace != "" {
				firstLinked = min(firstLinked, ts)
			}
		}
	}
	if firstLinked == 1<<64-1 {
		t.Fatalf("%s: no sample linked to a span (%d samples, recording started %s)", label, len(samples), recStart.Format(time.RFC3339Nano))
	}
	t.Logf("%s: first linked sample %.1f ms after the first sample", label, float64(firstLinked-first)/1e6)

	known := map[string]bool{} // thread ids with ground truth
	for _, kind := range []string{"sync", "asyncio"} {
		spans := readTruth(t, truthPath+"."+kind)
		var sub []truth.Sample
		for _, s := range samples {
			tid, _ := strconv.Atoi(s.Attrs["thread.id"])
			if _, ok := spans[tid]; ok {
				sub = append(sub, s)
				known[s.Attrs["thread.id"]] = true
			}
		}
		c := measureCorrelation(sub, spans)
		wrong := c.Linked - c.LinkedRight
		a := measureSpanAttrs(sub, names)
		t.Logf("%s %s: in-span samples %d, with the right ids %d (%.3f%%); linked %d, wrong %d (%.3f%%), outside their span ±50µs %d; span.name right on %d/%d linked, http.route right on %d/%d",
			label, kind, c.InSpan, c.InSpanRight, pct(c.InSpanRight, c.InSpan), c.Linked, wrong, pct(wrong, c.Linked),
			c.LinkedOutside, a.nameRight, a.linked, a.routeRight, a.linked)
		minIn := 300
		if kind == "asyncio" {
			minIn = 100 // one of the four threads sharing the GIL
		}
		if c.InSpan < minIn {
			t.Fatalf("%s %s: only %d samples inside span windows, want ≥ %d (%s)", label, kind, c.InSpan, minIn, c.Ranges())
		}
		if pct(c.InSpanRight, c.InSpan) < 99 {
			t.Errorf("%s %s: %.3f%% of in-span samples carry the span's ids, want ≥ 99%%", label, kind, pct(c.InSpanRight, c.InSpan))
		}
		if pct(wrong, c.Linked) >= 0.1 {
			t.Errorf("%s %s: %.3f%% of linked samples are wrong, want < 0.1%%", label, kind, pct(wrong, c.Linked))
		}
		if c.LinkedOutside > 0 {
			t.Errorf("%s %s: %d linked samples lie outside their span's windows: %s", label, kind, c.LinkedOutside, truth.DescribeWrong(sub, spans, 5))
		}
		if pct(a.nameRight, a.linked) < 99.9 {
			t.Errorf("%s %s: span.name right on %.3f%% of linked samples, want ≥ 99.9%%", label, kind, pct(a.nameRight, a.linked))
		}
		if pct(a.routeRight, a.linked) < 99.9 {
			t.Errorf("%s %s: http.route right (present exactly when the span had one) on %.3f%% of linked samples, want ≥ 99.9%%",
				label, kind, pct(a.routeRight, a.linked))
		}
	}
	// The main thread only waits: it has no span and no sample of it may
	// carry one.
	for _, s := range samples {
		if !known[s.Attrs["thread.id"]] && s.Trace != "" {
			t.Errorf("%s: sample of thread %s (no span ever) linked to %s/%s", label, s.Attrs["thread.id"], s.Trace, s.Span)
		}
	}
	// service.name comes from the TracerProvider's resource through the
	// process context (OTEL_SERVICE_NAME is empty).
	if got := resourceAttr(t, out, "service.name"); got != service {
		t.Errorf("%s: resource service.name %q, want %q (the provider's resource, through the process context)", label, got, service)
	}
}

// runPythonLate starts spanwork.py gated: OpenTelemetry, and with it the
// SDK's extension, is imported only once spanprof is recording, so the
// thread context appears in a process the recording already scanned. It
// reports how long linking took and judges the spans that began after it.
func runPythonLate(t *testing.T, version, python string) {
	dir := t.TempDir()
	truthPath := filepath.Join(dir, "truth")
	fix := exec.Command(python, filepath.Join(repoRoot, "testdata", "python", "spanwork.py"), truthPath,
		"--sdk", "--gate", "--duration", "7")
	fix.Env = append(os.Environ(), "OTEL_PYTHON_CONTEXT=spanprof", "OTEL_SERVICE_NAME=")
	out := filepath.Join(dir, "p.otlp.json")
	recordGated(t, fix, "--frequency", "999", "--duration", "9s", "--output", out)
	b, err := os.ReadFile(truthPath + ".loaded")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("bad load time %q: %v", b, err)
	}
	samples := readOTLP(t, out)
	firstLinked := uint64(1<<64 - 1)
	for _, s := range samples {
		for _, ts := range s.Times {
			if s.Trace != "" {
				firstLinked = min(firstLinked, ts)
			}
		}
	}
	label := fmt.Sprintf("python %s late", version)
	if firstLinked == 1<<64-1 {
		t.Fatalf("%s: no sample linked to a span in 9 s of recording after OpenTelemetry was imported into the running process", label)
	}
	delay := time.Duration(firstLinked - loaded)
	t.Logf("%s: first linked sample %v after the import that loaded the extension", label, delay.Round(time.Millisecond))
	// The watcher rescans a process without a known source after
	// pipeline.RescanAfter (2 s); allow a second rescan.
	if delay > 5*time.Second {
		t.Errorf("%s: linking took %v after the extension was loaded, want ≤ 5s", label, delay)
	}
	for _, kind := range []string{"sync", "asyncio"} {
		spans := readTruth(t, truthPath+"."+kind)
		// Events from the first link on: the measure then leaves out the
		// spans that began before it and judges links against them all.
		unlinkedBefore := 0
		var sub []truth.Sample
		for _, s := range samples {
			tid, _ := strconv.Atoi(s.Attrs["thread.id"])
			if _, ok := spans[tid]; !ok {
				continue
			}
			after := s
			after.Times, after.Values = nil, nil
			for i, ts := range s.Times {
				switch {
				case ts >= firstLinked:
					after.Times = append(after.Times, ts)
					if i < len(s.Values) {
						after.Values = append(after.Values, s.Values[i])
					}
				case ts > loaded:
					unlinkedBefore++
				}
			}
			if len(after.Times) > 0 {
				sub = append(sub, after)
			}
		}
		c := measureCorrelation(sub, spans)
		wrong := c.Linked - c.LinkedRight
		t.Logf("%s %s: samples before linking %d; after: in-span %d, with the right ids %d (%.3f%%); linked %d, wrong %d (%.3f%%)",
			label, kind, unlinkedBefore, c.InSpan, c.InSpanRight, pct(c.InSpanRight, c.InSpan), c.Linked, wrong, pct(wrong, c.Linked))
		if c.InSpan < 100 {
			t.Fatalf("%s %s: only %d samples inside spans after linking (%s)", label, kind, c.InSpan, c.Ranges())
		}
		if pct(c.InSpanRight, c.InSpan) < 99 {
			t.Errorf("%s %s: %.3f%% of in-span samples after linking carry the span's ids, want ≥ 99%%", label, kind, pct(c.InSpanRight, c.InSpan))
		}
		if pct(wrong, c.Linked) >= 0.1 {
			t.Errorf("%s %s: %.3f%% of linked samples are wrong, want < 0.1%%: %s", label, kind, pct(wrong, c.Linked), truth.DescribeWrong(sub, spans, 5))
		}
	}
}

// recordBounded runs spanprof like spanprof() but fails the test when it
// has not exited after limit, with its goroutines (SIGQUIT) in the log: a
// 4 s recording once hung here until the test binary's timeout.
func recordBounded(t *testing.T, limit time.Duration, args ...string) {
	t.Helper()
	var buf strings.Builder
	cmd := exec.Command(binPath, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("spanprof %v: %v\n%s", args, err, buf.String())
		}
	case <-time.After(limit):
		cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		t.Fatalf("spanprof %v still running after %v; its goroutines:\n%s", args, limit, buf.String())
	}
}

type spanAttrCheck struct{ linked, nameRight, routeRight int }

// measureSpanAttrs checks span.name and http.route on linked samples
// against the names the app recorded for each span id.
func measureSpanAttrs(samples []truth.Sample, names map[string][2]string) spanAttrCheck {
	var a spanAttrCheck
	for _, s := range samples {
		if s.Trace == "" {
			continue
		}
		n := max(len(s.Values), 1)
		a.linked += n
		want, ok := names[s.Span]
		if !ok {
			continue
		}
		if s.Attrs["span.name"] == want[0] {
			a.nameRight += n
		}
		route, has := s.Attrs["http.route"]
		if (want[1] == "-" && !has) || (want[1] != "-" && route == want[1]) {
			a.routeRight += n
		}
	}
	return a
}

// readSpanNames reads "span_id name route" lines (route "-" when unset).
func readSpanNames(t *testing.T, path string) map[string][2]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.Fields(sc.Text())
		if len(p) != 3 {
			t.Fatalf("bad names line %q", sc.Text())
		}
		out[p[0]] = [2]string{p[1], p[2]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// resourceAttr is the string resource attribute key of the recording's
// (one) process.
func resourceAttr(t *testing.T, path, key string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var u pprofile.JSONUnmarshaler
	pd, err := u.UnmarshalProfiles(b)
	if err != nil {
		t.Fatalf("unmarshal %s: %v", path, err)
	}
	for _, rp := range pd.ResourceProfiles().All() {
		if v, ok := rp.Resource().Attributes().Get(key); ok {
			return v.AsString()
		}
	}
	return ""
}
