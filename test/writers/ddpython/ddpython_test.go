// Package ddpython runs Datadog's Python tracer (ddtrace, the pinned
// version of requirements.txt), whose native extension publishes the
// OTEP 4947 thread context otel_thread_ctx_v1 (a TLSDESC variable of a
// Rust cdylib loaded when ddtrace is imported) and an OTEP 4719 process
// context, under `spanprof record` and `spanprof agent`, and checks every
// sample's link against the tracer's own view of its spans, written down
// by testdata/ddwork.py. Needs root: spanprof loads eBPF programs.
package ddpython

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

// The process context's resource, from the tracer's DD_* settings: the
// environment spanprof reads holds none of these names.
const (
	service = "ddwork-py"
	env     = "spanprof-test"
	version = "1.2.3"
)

// setup runs make writer-ddpython-deps (the venv with the pinned ddtrace)
// and builds spanprof; it returns the binary, the venv's python and the
// workload.
func setup(t *testing.T) (bin, python, work string) {
	t.Helper()
	testutil.RequireRoot(t)
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", "..", ".."))
	if _, err := testutil.Make(".", "writer-ddpython-deps"); err != nil {
		t.Fatal(err)
	}
	python = filepath.Join(root, "out", "ddpython", "venv", "bin", "python")
	bin = filepath.Join(t.TempDir(), "spanprof")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "spanprof")).CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	return bin, python, filepath.Join(filepath.Dir(self), "testdata", "ddwork.py")
}

// traceSink stands in for the Datadog agent on loopback: it accepts what
// the tracer sends (traces, its info probe) and answers with an empty
// JSON object, so the tracer runs its real writer without an agent.
func traceSink(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// otlpSink is the collector `spanprof agent` exports to: it keeps every
// request's profiles.
type otlpSink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu  sync.Mutex
	got []pprofile.Profiles
}

func (s *otlpSink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	pd := pprofile.NewProfiles()
	req.Profiles().CopyTo(pd)
	s.mu.Lock()
	s.got = append(s.got, pd)
	s.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

func startOTLPSink(t *testing.T) (*otlpSink, string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s := &otlpSink{}
	pprofileotlp.RegisterGRPCServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return s, ln.Addr().String()
}

// nativeLoaded reports whether ddtrace's native extension is mapped in pid.
func nativeLoaded(t *testing.T, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), "ddtrace/internal/native/_native.")
}

type result struct {
	profiles []pprofile.Profiles
	truth    string // the workload's ground truth path
	loaded   uint64 // late: when the workload began to import ddtrace
	imported uint64 // and when the import returned
}

// run starts the workload, then spanprof (tool "record" or "agent") on
// it, lets the workload go once spanprof is up and stops spanprof when
// the workload has exited. late: ddtrace, and with it the native
// extension, is imported only after spanprof started; else before.
func run(t *testing.T, bin, python, work, tool string, late bool) result {
	dir := t.TempDir()
	res := result{truth: filepath.Join(dir, "truth")}
	args := []string{"-X", "perf", work, res.truth, "--threads", "3", "--seconds", "6"}
	if late {
		args = append(args, "--gate")
	}
	app := exec.Command(python, args...)
	app.Env = append(os.Environ(), "DD_TRACE_AGENT_URL="+traceSink(t), "DD_SERVICE="+service, "DD_ENV="+env, "DD_VERSION="+version,
		"DD_TRACE_OTEL_CTX_ENABLED=true", "DD_INSTRUMENTATION_TELEMETRY_ENABLED=false", "DD_REMOTE_CONFIGURATION_ENABLED=false",
		"DD_TRACE_STATS_COMPUTATION_ENABLED=false", "OTEL_SERVICE_NAME=", "OTEL_RESOURCE_ATTRIBUTES=")
	stdin, err := app.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	appOut, err := app.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var appErr strings.Builder
	app.Stderr = &appErr
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Process.Kill(); app.Wait() })
	line, err := bufio.NewReader(appOut).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "pid ") {
		t.Fatalf("workload first line %q: %v\n%s", line, err, appErr.String())
	}
	go io.Copy(io.Discard, appOut)
	pid := app.Process.Pid
	if got := nativeLoaded(t, pid); got == late {
		t.Fatalf("ddtrace's native extension mapped before spanprof starts: %v, want %v", got, !late)
	}

	var sink *otlpSink
	var spArgs []string
	out := filepath.Join(dir, "p.otlp.json")
	ready := "spanprof: recording"
	if tool == "record" {
		spArgs = []string{"record", "--pid", fmt.Sprint(pid), "--frequency", "999", "--duration", "60s", "--output", out}
	} else {
		var addr string
		sink, addr = startOTLPSink(t)
		spArgs = []string{"agent", "--endpoint", addr, "--insecure", "--pid", fmt.Sprint(pid), "--frequency", "999",
			"--report-interval", "2s", "--metrics-listen", "off"}
		ready = "agent started"
	}
	sp := exec.Command(bin, spArgs...)
	spErr, err := sp.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Process.Kill(); sp.Wait() })
	var log strings.Builder
	sc := bufio.NewScanner(spErr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), ready) {
			break
		}
	}
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
	}()
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatalf("start the workload: %v\n%s", err, log.String())
	}
	if err := app.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, appErr.String())
	}
	// record writes its file on Ctrl-C; the agent sends its last profile
	// on SIGTERM.
	sig := syscall.SIGINT
	if tool == "agent" {
		sig = syscall.SIGTERM
	}
	sp.Process.Signal(sig)
	<-logged
	if err := sp.Wait(); err != nil {
		t.Fatalf("spanprof %s: %v\n%s", tool, err, log.String())
	}
	if tool == "record" {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var u pprofile.JSONUnmarshaler
		pd, err := u.UnmarshalProfiles(b)
		if err != nil {
			t.Fatalf("unmarshal %s: %v", out, err)
		}
		res.profiles = []pprofile.Profiles{pd}
	} else {
		sink.mu.Lock()
		res.profiles = sink.got
		sink.mu.Unlock()
	}
	if len(res.profiles) == 0 {
		t.Fatalf("spanprof %s delivered no profile\n%s", tool, log.String())
	}
	if late {
		b, err := os.ReadFile(res.truth + ".loaded")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(string(b), &res.loaded, &res.imported); err != nil {
			t.Fatalf("bad load times %q: %v", b, err)
		}
	}
	return res
}

// TestDDTracePython is ddtrace's tracer on three threads, each running
// root spans with a child and CPU work in both and between spans, under
// both tools, with the native extension loaded before spanprof starts
// ("early") and while it runs ("late", found through the loader's
// debugger hook).
func TestDDTracePython(t *testing.T) {
	bin, python, work := setup(t)
	for _, tool := range []string{"record", "agent"} {
		for _, late := range []bool{false, true} {
			name := tool + "-early"
			if late {
				name = tool + "-late"
			}
			t.Run(name, func(t *testing.T) {
				res := run(t, bin, python, work, tool, late)
				judge(t, name, res, late)
			})
		}
	}
}

// judge scores the samples against the tracer's view: every sample well
// inside a span carries its ids, none in a gap or outside its span does,
// every linked one carries the local root span id ddtrace publishes, and
// the resource comes from the process context.
func judge(t *testing.T, name string, res result, late bool) {
	var samples []truth.Sample
	withCtx := 0 // reports with the record's attribute named: the process context was read
	for _, pd := range res.profiles {
		named := false
		for _, s := range truth.Samples(pd) {
			if s.Kind == "samples" {
				samples = append(samples, s)
				_, ok := s.Attrs["datadog.local_root_span_id"]
				named = named || ok
			}
		}
		if !named {
			// A report of the time before the process context was
			// read: the tracer publishes it after the extension loads.
			continue
		}
		withCtx++
		for _, rp := range pd.ResourceProfiles().All() {
			attrs := rp.Resource().Attributes()
			for k, want := range map[string]string{"service.name": service, "deployment.environment.name": env,
				"service.version": version, "telemetry.sdk.name": "libdatadog"} {
				got := "(absent)"
				if v, ok := attrs.Get(k); ok {
					got = v.AsString()
				}
				if got != want {
					t.Errorf("%s: resource %s %q, want %q (the tracer's process context)", name, k, got, want)
				}
			}
		}
	}
	if withCtx == 0 {
		t.Errorf("%s: no report with a sample carrying datadog.local_root_span_id", name)
	}
	spans, err := truth.ReadSpans(res.truth)
	if err != nil {
		t.Fatal(err)
	}
	roots := readRoots(t, res.truth+".names")
	gaps := readGaps(t, res.truth+".gaps")
	var worker []truth.Sample
	for _, s := range samples {
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		if _, ok := spans[tid]; ok {
			worker = append(worker, s)
			continue
		}
		// The main thread and the tracer's own threads run no span.
		if s.Trace != "" {
			t.Errorf("%s: sample of thread %s (no span ever) linked to %s/%s", name, s.Attrs["thread.id"], s.Trace, s.Span)
		}
	}
	c := truth.MeasureCorrelation(worker, spans)
	wrong := c.Linked - c.LinkedRight
	const margin = uint64(50 * time.Microsecond)
	var gap, gapLinked, rootRight, rootWrong int
	firstLink, firstNamed := uint64(1<<64-1), uint64(1<<64-1)
	for _, s := range worker {
		if _, ok := s.Attrs["datadog.local_root_span_id"]; ok && s.Trace != "" {
			for _, ts := range s.Times {
				firstNamed = min(firstNamed, ts)
			}
		}
	}
	missing := 0 // linked samples without the attribute after the first with it
	for _, s := range worker {
		tid, _ := strconv.Atoi(s.Attrs["thread.id"])
		root, named := s.Attrs["datadog.local_root_span_id"]
		for _, ts := range s.Times {
			if s.Trace != "" {
				firstLink = min(firstLink, ts)
				switch {
				case named && root == roots[s.Span]:
					rootRight++
				case named:
					rootWrong++
				case ts > firstNamed:
					missing++
				}
			}
			for _, g := range gaps[tid] {
				if ts >= g[0]+margin && ts+margin <= g[1] {
					gap++
					if s.Trace != "" {
						gapLinked++
					}
				}
			}
		}
	}
	t.Logf("%s: in-span samples %d, with the span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d; "+
		"datadog.local_root_span_id right on %d/%d linked, wrong on %d, missing after the first named %d; Python function right on %d/%d in-span",
		name, c.InSpan, c.InSpanRight, truth.Pct(c.InSpanRight, c.InSpan), c.Linked, wrong, truth.Pct(wrong, c.Linked),
		gap, gapLinked, rootRight, c.Linked, rootWrong, missing, c.FunctionRight, c.CheckedF)
	if firstLink != 1<<64-1 && firstNamed != 1<<64-1 {
		// The ids need the thread context alone, the attribute's name the
		// process context too, which the tracer publishes after its
		// extension loads.
		t.Logf("%s: first sample with the attribute named %v after the first linked one", name,
			time.Duration(int64(firstNamed-firstLink)).Round(time.Millisecond))
	}
	if res.loaded != 0 && firstLink != 1<<64-1 {
		t.Logf("%s: first linked sample %v after the import that loaded the extension began, %v after it returned", name,
			time.Duration(int64(firstLink-res.loaded)).Round(time.Millisecond),
			time.Duration(int64(firstLink-res.imported)).Round(time.Millisecond))
	}
	if c.InSpan < 500 {
		t.Fatalf("%s: only %d samples inside span windows (%s)", name, c.InSpan, c.Ranges())
	}
	if p := truth.Pct(c.InSpanRight, c.InSpan); p < 99 {
		t.Errorf("%s: %.3f%% of in-span samples carry their span's ids, want ≥ 99%%", name, p)
	}
	if wrong > 0 || c.LinkedOutside > 0 {
		t.Errorf("%s: %d linked samples are wrong (%d outside their span's windows by more than 50µs), want 0", name, wrong, c.LinkedOutside)
	}
	if gap < 100 || gapLinked > 0 {
		t.Errorf("%s: %d of %d samples in gaps between spans are linked, want 0 (of ≥ 100)", name, gapLinked, gap)
	}
	// Before the process context is read the attribute cannot be named
	// (counted as unnamed); once it is, every linked sample carries the
	// right one, and none ever a wrong one.
	if rootWrong > 0 || missing > 0 || rootRight == 0 {
		t.Errorf("%s: datadog.local_root_span_id right on %d of %d linked samples, wrong on %d, missing on %d after the first named one; want none wrong or missing",
			name, rootRight, c.Linked, rootWrong, missing)
	}
	if !late && rootRight != c.Linked {
		t.Errorf("%s: datadog.local_root_span_id right on %d of %d linked samples, want all (the extension and its process context were there before spanprof)",
			name, rootRight, c.Linked)
	}
	if p := truth.Pct(c.FunctionRight, c.CheckedF); p < 95 {
		t.Errorf("%s: the span's Python function is in the stack of %.3f%% of in-span samples, want ≥ 95%%", name, p)
	}
}

// readRoots reads the workload's "span\tname\tresource\tlocal_root" lines:
// the local root span id ddtrace gave each span.
func readRoots(t *testing.T, path string) map[string]string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p := strings.Split(l, "\t")
		if len(p) != 4 {
			t.Fatalf("bad names line %q", l)
		}
		out[p[0]] = p[3]
	}
	return out
}

// readGaps reads "tid from to" lines: stretches a thread had no span.
func readGaps(t *testing.T, path string) map[int][][2]uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][][2]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var tid int
		var from, to uint64
		if _, err := fmt.Sscan(l, &tid, &from, &to); err != nil {
			t.Fatalf("bad gaps line %q: %v", l, err)
		}
		out[tid] = append(out[tid], [2]uint64{from, to})
	}
	return out
}
