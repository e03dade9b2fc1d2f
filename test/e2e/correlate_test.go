package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/tracectx"
	"github.com/spanprof/spanprof/test/truth"
)

type truthSpan = truth.Span

func readTruth(t *testing.T, path string) map[int][]truthSpan {
	t.Helper()
	spans, err := truth.ReadSpans(path)
	if err != nil {
		t.Fatal(err)
	}
	return spans
}

// measureCorrelation compares samples with the ground truth
// (truth.MeasureCorrelation).
var measureCorrelation = truth.MeasureCorrelation

var containsFrame = truth.ContainsFrame

// TestCorrelationNative records the native workloads in every linking mode
// the thread context has (glibc: executable, DT_NEEDED library, dlopen,
// dlopen after the static TLS surplus is used up, so through the DTV;
// musl: static, DT_NEEDED library, dlopen) and the uprobe hook, and checks
// the eBPF reader's links against the workload's ground truth. The location
// the agent derives is checked too, so a variant that drifts into another
// mode (a glibc giving the dlopen'ed library static TLS after all) fails
// instead of testing the wrong reader.
func TestCorrelationNative(t *testing.T) {
	testutil.RequireRoot(t)
	bin := filepath.Join(repoRoot, "testdata", "tracectx", "build")
	lib := func(name string) string { return filepath.Join(bin, name) }
	for _, v := range []struct {
		name string
		bin  string // the program, when not name
		env  []string
		kind tracectx.LocationKind
		musl bool
		// noAttrs: the variant publishes ids only (the uprobe hook).
		noAttrs bool
	}{
		{name: "workload-gcc", kind: tracectx.LocationStaticTP},
		{name: "workload-clang", kind: tracectx.LocationStaticTP},
		{name: "workload-lib", kind: tracectx.LocationStaticTP},
		{name: "workload-dlopen", env: []string{"WL_CTX_LIB=" + lib("libwlctx.so")}, kind: tracectx.LocationStaticTP},
		{name: "workload-dlopen-dtv", bin: "workload-dlopen", env: []string{"WL_CTX_LIB=" + lib("libwlctx.so"), "WL_TLS_FILL=" + lib("libtlsfill.so")},
			kind: tracectx.LocationDTV},
		{name: "workload-dlopen-dtv-late", bin: "workload-dlopen", env: []string{"WL_CTX_LIB=" + lib("libwlctx.so"), "WL_TLS_FILL=" + lib("libtlsfill.so"), "WL_DLOPEN_LATE=1"},
			kind: tracectx.LocationDTV},
		{name: "workload-musl-static", kind: tracectx.LocationStaticTP, musl: true},
		{name: "workload-musl-lib", kind: tracectx.LocationStaticTP, musl: true},
		{name: "workload-musl-dlopen", env: []string{"WL_CTX_LIB=" + lib("libwlctx-musl.so")}, kind: tracectx.LocationDTV, musl: true},
		{name: "workload-musl-dlopen-late", bin: "workload-musl-dlopen", env: []string{"WL_CTX_LIB=" + lib("libwlctx-musl.so"), "WL_DLOPEN_LATE=1"},
			kind: tracectx.LocationDTV, musl: true},
		{name: "workload-hook", kind: tracectx.LocationNone, noAttrs: true},
	} {
		t.Run(v.name, func(t *testing.T) {
			if v.musl && muslMissing != "" {
				t.Skip(muslMissing)
			}
			exe := v.name
			if v.bin != "" {
				exe = v.bin
			}
			dir := t.TempDir()
			truthPath := filepath.Join(dir, "truth")
			// The workload runs until told to stop, so a slow start of
			// spanprof on a loaded machine cannot outlast it.
			fix := startProgramEnv(t, v.env, filepath.Join(bin, exe), truthPath, "120", "4")
			waitLocation(t, fix.Process.Pid, v.kind, v.musl)
			out := filepath.Join(dir, "p.otlp.json")
			spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "3s", "--output", out)
			fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
			if err := fix.Wait(); err != nil {
				t.Fatalf("workload: %v", err)
			}
			spans := readTruth(t, truthPath)
			samples := readOTLP(t, out)
			c := measureCorrelation(samples, spans)
			a := truth.MeasureAttributes(samples)
			t.Logf("%s: attributes on linked samples: present %d/%d (%.3f%%), right %d (%.3f%%); on unlinked samples: %d",
				v.name, a.Present, a.Linked, pct(a.Present, a.Linked), a.Right, pct(a.Right, a.Linked), a.Stray)
			if v.noAttrs {
				if a.Present > 0 {
					t.Errorf("%d samples carry attributes the variant never published", a.Present)
				}
			} else if pct(a.Right, a.Linked) < 99.9 {
				t.Errorf("%.3f%% of linked samples carry their span's three attributes, want ≥ 99.9%%", pct(a.Right, a.Linked))
			}
			if a.Stray > 0 {
				t.Errorf("%d samples outside any span carry span attributes", a.Stray)
			}
			t.Logf("%s: in-span samples %d, with the right ids %d (%.3f%%); linked %d, right %d (%.3f%%); linked outside their window ±50µs: %d; span function on stack %d/%d",
				v.name, c.InSpan, c.InSpanRight, pct(c.InSpanRight, c.InSpan), c.Linked, c.LinkedRight, pct(c.LinkedRight, c.Linked),
				c.LinkedOutside, c.FunctionRight, c.CheckedF)
			if c.InSpan < 300 {
				t.Fatalf("only %d samples inside span windows (%s)", c.InSpan, c.Ranges())
			}
			if pct(c.InSpanRight, c.InSpan) < 99.5 {
				t.Errorf("%.3f%% of in-span samples carry the span's ids, want ≥ 99.5%%", pct(c.InSpanRight, c.InSpan))
			}
			if pct(c.LinkedRight, c.Linked) < 99.9 {
				t.Errorf("%.3f%% of linked samples are right, want ≥ 99.9%%", pct(c.LinkedRight, c.Linked))
			}
			// Samples inside libc's clock_gettime lose the span's function:
			// libc has no frame pointers and the frame is not the leaf.
			if pct(c.FunctionRight, c.CheckedF) < 95 {
				t.Errorf("span function on the stack in %.2f%% of in-span samples, want ≥ 95%%", pct(c.FunctionRight, c.CheckedF))
			}
			if c.LinkedOutside > 0 {
				t.Errorf("%d linked samples lie outside their span window by more than 50µs", c.LinkedOutside)
			}
		})
	}
}

// waitLocation waits until the workload has published its thread context
// (a dlopen'ed library appears after start-up) and checks how the agent
// reaches it.
func waitLocation(t *testing.T, pid int, kind tracectx.LocationKind, musl bool) {
	t.Helper()
	var info *tracectx.ProcessInfo
	for range 50 {
		var err error
		if info, err = tracectx.Scan(pid); err != nil {
			t.Fatal(err)
		}
		if info.ThreadContext.Kind != tracectx.LocationNone || kind == tracectx.LocationNone {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	loc := info.ThreadContext
	if loc.Kind != kind || loc.Musl != (musl && kind == tracectx.LocationDTV) {
		t.Fatalf("thread context location %+v (module %s, scan errors %v), want %v (musl %v)",
			loc, info.ThreadContextModule, info.Errors, kind, musl)
	}
}

// TestCorrelationGo runs the SDK-instrumented Go service (goroutine labels)
// built normally and stripped.
func TestCorrelationGo(t *testing.T) {
	testutil.RequireRoot(t)
	src := filepath.Join(repoRoot, "testdata", "golabels", "service")
	for _, v := range []struct{ name, ldflags string }{{"plain", ""}, {"stripped", "-s -w"}} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "service")
			build := exec.Command("go", "build", "-ldflags="+v.ldflags, "-o", bin, ".")
			build.Dir = src
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("build service: %v\n%s", err, out)
			}
			truthPath := filepath.Join(dir, "truth")
			// The service runs until told to stop, so a slow start of
			// spanprof on a loaded machine cannot outlast it (a fixed
			// 12 s did: the recording then held no sample of a span).
			fix := startProgram(t, bin, "-duration", "120s", "-out", truthPath, "-gomaxprocs", "2")
			out := filepath.Join(dir, "p.otlp.json")
			spanprof(t, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999", "--duration", "3s", "--output", out)
			fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
			if err := fix.Wait(); err != nil {
				t.Fatalf("service: %v", err)
			}
			c := measureCorrelation(readOTLP(t, out), readTruth(t, truthPath))
			t.Logf("go %s: in-span samples %d, with the right ids %d (%.3f%%); linked %d, right %d (%.3f%%; %d on a thread the goroutine was not yet locked to); linked outside their window ±50µs: %d; span function on stack %d/%d",
				v.name, c.InSpan, c.InSpanRight, pct(c.InSpanRight, c.InSpan), c.Linked, c.LinkedRight, pct(c.LinkedRight, c.Linked),
				c.LinkedUnlocked, c.LinkedOutside, c.FunctionRight, c.CheckedF)
			if c.InSpan < 300 {
				t.Fatalf("only %d samples inside span windows (%s)", c.InSpan, c.Ranges())
			}
			if pct(c.InSpanRight, c.InSpan) < 99.5 {
				t.Errorf("%.3f%% of in-span samples carry the span's ids, want ≥ 99.5%%", pct(c.InSpanRight, c.InSpan))
			}
			if pct(c.LinkedRight, c.Linked) < 99.9 {
				t.Errorf("%.3f%% of linked samples are right, want ≥ 99.9%%", pct(c.LinkedRight, c.Linked))
			}
			if pct(c.FunctionRight, c.CheckedF) < 95 {
				t.Errorf("span function on the stack in %.2f%% of in-span samples, want ≥ 95%%", pct(c.FunctionRight, c.CheckedF))
			}
		})
	}
}

var pct = truth.Pct
