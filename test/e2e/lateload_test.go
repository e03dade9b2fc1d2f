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
	"github.com/spanprof/spanprof/test/truth"
)

// lateRecording is one recording of a workload that loads a library
// while it is recorded.
type lateRecording struct {
	log     string            // spanprof's stderr
	events  map[string]uint64 // the workload's WL_EVENTS: loaded, updated
	samples []truth.Sample
	spans   map[int][]truthSpan
	// service is the service.name of the workload's resource in the
	// profile.
	service string
}

// recordLate starts the workload exe with env, records it for d with
// spanprof, and opens the gate (WL_LATE_WHEN) once spanprof says it is
// recording, so that the workload's late delays count from a moment the
// recording was already under way.
func recordLate(t *testing.T, exe string, env []string, d time.Duration) lateRecording {
	t.Helper()
	dir := t.TempDir()
	truthPath, events, gate := filepath.Join(dir, "truth"), filepath.Join(dir, "events"), filepath.Join(dir, "gate")
	env = append(env, "WL_EVENTS="+events, "WL_LATE_WHEN="+gate)
	fix := startProgramEnv(t, env, exe, truthPath, "600", "2")
	out := filepath.Join(dir, "p.otlp.json")
	logPath := filepath.Join(dir, "spanprof.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	rec := exec.Command(binPath, "record", "--pid", fmt.Sprint(fix.Process.Pid), "--frequency", "999",
		"--duration", d.String(), "--output", out)
	rec.Stdout, rec.Stderr = logf, logf
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Process.Kill(); rec.Wait() })
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), "spanprof: recording") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spanprof did not start recording in a minute:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rec.Wait(); err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("spanprof record: %v\n%s", err, b)
	}
	fix.Process.Signal(syscall.SIGTERM) // it writes its ground truth and exits
	if err := fix.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	b, _ := os.ReadFile(logPath)
	r := lateRecording{log: string(b), events: readEvents(t, events), samples: readOTLP(t, out), spans: readTruth(t, truthPath)}
	r.service = serviceOf(t, out, fix.Process.Pid)
	return r
}

// readEvents reads the workload's "NAME REALTIME_NS" lines.
func readEvents(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ev := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, ns, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(ns, 10, 64)
		if !ok || err != nil {
			t.Fatalf("bad event line %q", sc.Text())
		}
		ev[name] = n
	}
	return ev
}

// serviceOf is the service.name of pid's resource in the OTLP file.
func serviceOf(t *testing.T, path string, pid int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var u pprofile.JSONUnmarshaler
	pd, err := u.UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, rp := range pd.ResourceProfiles().All() {
		attrs := rp.Resource().Attributes()
		if p, ok := attrs.Get("process.pid"); ok && p.Int() == int64(pid) {
			if s, ok := attrs.Get("service.name"); ok {
				return s.AsString()
			}
		}
	}
	return ""
}

// closingCount is the number that stands before what in the closing line
// of spanprof's log that holds it; -1 when no line does.
func closingCount(log, what string) int {
	for _, l := range strings.Split(log, "\n") {
		rest, ok := strings.CutPrefix(l, "spanprof: trace context: ")
		if !ok {
			continue
		}
		i := strings.Index(rest, what)
		if i < 0 {
			continue
		}
		f := strings.Fields(rest[:i])
		if len(f) == 0 {
			continue
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err == nil {
			return n
		}
	}
	return -1
}

// TestLateLoad: a process that runs for a while without any context
// source, then dlopens the library holding otel_thread_ctx_v1 12 s into
// the recording (past the rescans of a process's first 10 s), publishes
// its process context with it and republishes it later with another
// service.name. The dynamic loader's hook tells the watcher of the load,
// so the samples of the spans after it are linked, and the process
// context's update is read again.
func TestLateLoad(t *testing.T) {
	testutil.RequireRoot(t)
	bin := filepath.Join(repoRoot, "testdata", "tracectx", "build")
	r := recordLate(t, filepath.Join(bin, "workload-dlopen"), []string{
		"WL_CTX_LIB=" + filepath.Join(bin, "libwlctx.so"), "WL_DLOPEN_DELAY=12", "WL_CTX_UPDATE=1.5"}, 20*time.Second)
	loaded, updated := r.events["loaded"], r.events["updated"]
	if loaded == 0 || updated == 0 {
		t.Fatalf("workload events %v: want loaded and updated", r.events)
	}
	// Every span began after the load (the threads ran gap_work until
	// then): nothing before it may carry a link.
	var first uint64 // the first linked sample
	early := 0
	for _, s := range r.samples {
		if s.Trace == "" {
			continue
		}
		for _, ts := range s.Times {
			if ts < loaded {
				early++
			}
			if first == 0 || ts < first {
				first = ts
			}
		}
	}
	if early > 0 {
		t.Errorf("%d samples before the library was loaded carry a link", early)
	}
	if first == 0 {
		t.Fatalf("no sample linked after the late load; spanprof's log:\n%s", r.log)
	}
	delay := time.Duration(first - loaded)
	all := measureCorrelation(r.samples, r.spans)
	// From the first linked sample on: the spans whose start follows it.
	after := map[int][]truthSpan{}
	for tid, spans := range r.spans {
		for _, sp := range spans {
			if sp.Start > first {
				after[tid] = append(after[tid], sp)
			}
		}
	}
	c := measureCorrelation(r.samples, after)
	t.Logf("late dlopen: first linked sample %v after the load; in-span samples after the load %d, linked right %d (%.3f%%); from the first linked sample on %d, right %d (%.3f%%); linked %d, right %d (%.3f%%)",
		delay, all.InSpan, all.InSpanRight, pct(all.InSpanRight, all.InSpan), c.InSpan, c.InSpanRight, pct(c.InSpanRight, c.InSpan),
		all.Linked, all.LinkedRight, pct(all.LinkedRight, all.Linked))
	if delay > 1500*time.Millisecond {
		t.Errorf("first linked sample %v after the load, want ≤ 1.5 s (the reader's poll, then the scan; a retry 1 s after)", delay)
	}
	if c.InSpan < 300 {
		t.Fatalf("only %d samples inside span windows after the load (%s)", c.InSpan, c.Ranges())
	}
	if pct(c.InSpanRight, c.InSpan) < 99 {
		t.Errorf("%.3f%% of in-span samples after the first linked one carry their span's ids, want ≥ 99%%", pct(c.InSpanRight, c.InSpan))
	}
	if pct(all.LinkedRight, all.Linked) < 99.9 {
		t.Errorf("%.3f%% of linked samples are right, want ≥ 99.9%%", pct(all.LinkedRight, all.Linked))
	}
	if n := closingCount(r.log, "library loads or unloads seen"); n < 1 {
		t.Errorf("record's closing lines count %d library loads, want ≥ 1:\n%s", n, r.log)
	}
	if n := closingCount(r.log, "new context sources"); n < 1 {
		t.Errorf("record's closing lines count %d new context sources after a load, want ≥ 1:\n%s", n, r.log)
	}
	// The process context was published with the library and updated
	// 1.5 s later, after the retries of the load's scans: a check (every
	// 5 s; 6.5 s remain) read the update before the end.
	if r.service != "spanprof-workload-updated" {
		t.Errorf("service.name %q in the profile, want the updated spanprof-workload-updated; log:\n%s", r.service, r.log)
	}
	if n := closingCount(r.log, "process-context updates read again"); n < 1 {
		t.Errorf("record's closing lines count %d process-context updates, want ≥ 1:\n%s", n, r.log)
	}
}

// TestLateLoadSecondModule: a process whose executable defines
// otel_thread_ctx_v1 loads a library that defines it too. The loader's
// hook rescans it, and the executable's variable stays the one read (the
// dynamic linker binds the symbol to the executable's definition first):
// every span keeps its link, before and after the load, and the rescan
// configures no new source.
func TestLateLoadSecondModule(t *testing.T) {
	testutil.RequireRoot(t)
	bin := filepath.Join(repoRoot, "testdata", "tracectx", "build")
	r := recordLate(t, filepath.Join(bin, "workload-gcc"), []string{
		"WL_LATE_LIB=" + filepath.Join(bin, "libwlctx.so"), "WL_LATE_AFTER=2"}, 5*time.Second)
	loaded := r.events["loaded"]
	if loaded == 0 {
		t.Fatalf("workload events %v: want loaded", r.events)
	}
	before, after := map[int][]truthSpan{}, map[int][]truthSpan{}
	for tid, spans := range r.spans {
		for _, sp := range spans {
			if sp.End < loaded {
				before[tid] = append(before[tid], sp)
			} else if sp.Start > loaded {
				after[tid] = append(after[tid], sp)
			}
		}
	}
	b, a := measureCorrelation(r.samples, before), measureCorrelation(r.samples, after)
	t.Logf("second module: in-span samples before the load %d, right %d (%.3f%%); after %d, right %d (%.3f%%)",
		b.InSpan, b.InSpanRight, pct(b.InSpanRight, b.InSpan), a.InSpan, a.InSpanRight, pct(a.InSpanRight, a.InSpan))
	for _, c := range []struct {
		what string
		c    truth.Correlation
	}{{"before the load", b}, {"after the load", a}} {
		if c.c.InSpan < 300 {
			t.Fatalf("only %d samples inside span windows %s (%s)", c.c.InSpan, c.what, c.c.Ranges())
		}
		if pct(c.c.InSpanRight, c.c.InSpan) < 99.5 {
			t.Errorf("%.3f%% of in-span samples %s carry their span's ids, want ≥ 99.5%%", pct(c.c.InSpanRight, c.c.InSpan), c.what)
		}
	}
	if n := closingCount(r.log, "library loads or unloads seen"); n < 1 {
		t.Errorf("record's closing lines count %d library loads, want ≥ 1:\n%s", n, r.log)
	}
	if n := closingCount(r.log, "new context sources"); n != 0 {
		t.Errorf("record's closing lines count %d new context sources after loading a second definition, want 0 (the executable's stays read):\n%s", n, r.log)
	}
}
