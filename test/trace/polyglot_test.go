package trace

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/web/live"
	gt "github.com/spanprof/spanprof/test/truth"
)

// The polyglot example (make demo-polyglot): one trace across three
// services on loopback, each instrumented the way its users do it.
// goservice (OpenTelemetry Go SDK and sdk/go) calls javaservice
// (com.sun.net.httpserver under the OpenTelemetry Java agent, with
// spanprof's agent extension), which calls pyservice (Flask under
// opentelemetry-instrument, with OTEL_PYTHON_CONTEXT=spanprof); the W3C
// traceparent header carries the trace. The Java and Python services use
// the OpenTelemetry API alone, for their inner spans of known work. Spans
// and the agent's profiles go through the OpenTelemetry Collector to
// `spanprof serve --otlp-listen`; the collector also writes the profiles
// to a file, to judge every sample against the services' own account.
const polyglotConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  otlp:
    endpoint: %s
    tls:
      insecure: true
  profilefile:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp]
    profiles:
      receivers: [otlp]
      exporters: [otlp, profilefile]
`

// The pinned OpenTelemetry Java agent and API the Makefile fetches
// (tracework-deps) into testdata/tracework/build.
const (
	javaAgentJar = "javaagent/opentelemetry-javaagent-2.31.0.jar"
	javaAPIJars  = "javaagent/opentelemetry-api-1.65.0.jar:javaagent/opentelemetry-context-1.65.0.jar:javaagent/opentelemetry-common-1.65.0.jar"
)

// spanTruth is one span's ground truth with where it ran: its thread and
// the wall-clock bounds of its work.
type spanTruth struct {
	truth
	service, trace, span string
	tid                  int
	start, end           int64
}

// truthLog collects the truth lines a service prints as it serves.
type truthLog struct {
	mu    sync.Mutex
	spans map[string][]spanTruth // trace → spans
}

// follow reads p's stdout from now on: "truth TRACE SPAN NAME TID START END
// CPU WAIT RUN" lines of service.
func (l *truthLog) follow(p *proc, service string) {
	go func() {
		for p.out.Scan() {
			f := strings.Fields(p.out.Text())
			if len(f) != 10 || f[0] != "truth" {
				continue
			}
			st := spanTruth{truth: parseTruth(f[3], f[7:]), service: service, trace: f[1], span: f[2]}
			fmt.Sscan(f[4], &st.tid)
			fmt.Sscan(f[5], &st.start)
			fmt.Sscan(f[6], &st.end)
			l.mu.Lock()
			l.spans[st.trace] = append(l.spans[st.trace], st)
			l.mu.Unlock()
		}
	}()
}

// wait returns trace's spans of service once n of them have been printed.
func (l *truthLog) wait(t *testing.T, trace, service string, n int) []spanTruth {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var out []spanTruth
		l.mu.Lock()
		for _, s := range l.spans[trace] {
			if s.service == service {
				out = append(out, s)
			}
		}
		l.mu.Unlock()
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d truth lines of %s, want %d", trace, len(out), service, n)
		}
	}
}

// pyenvPython finds CPython X.Y from pyenv (PYENV_ROOT, else ~/.pyenv).
func pyenvPython(versions ...string) string {
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	for _, v := range versions {
		if m, _ := filepath.Glob(filepath.Join(root, "versions", v+".*", "bin", "python3")); len(m) > 0 {
			return m[len(m)-1]
		}
	}
	return ""
}

func TestThreeServicesPolyglot(t *testing.T) { polyglot(t, "") }

func polyglot(t *testing.T, store string) {
	testutil.RequireRoot(t, "skip: profiling needs root")
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skip: no BTF at /sys/kernel/btf/vmlinux")
	}
	root, _ := filepath.Abs("../..")
	work := filepath.Join(root, "testdata/tracework/build")
	java, errJava := exec.LookPath("java")
	javac, errJavac := exec.LookPath("javac")
	if errJava != nil || errJavac != nil {
		t.Skip("skip: no java and javac on PATH (a JDK 17 or later)")
	}
	venv := filepath.Join(work, "venv")
	for _, f := range []string{filepath.Join(work, javaAgentJar), filepath.Join(venv, "bin", "opentelemetry-instrument")} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("skip: %s missing: run make tracework-deps (the pinned Java agent and the Python service's venv)", f)
		}
	}
	// The SDKs: spanprof's Java agent extension and the Python runtime
	// context. Without one, its runtime's spans cannot carry ids to the
	// samples, and the test says so and judges that runtime's samples by
	// time alone.
	ext := filepath.Join(root, "sdk/java/build/spanprof-otel.jar")
	javaSDK := true
	if _, err := os.Stat(ext); err != nil {
		javaSDK = false
		t.Logf("no %s (make java-sdk): the Java service runs without spanprof's extension; its link checks are skipped", ext)
	}
	pyCheck := exec.Command(filepath.Join(venv, "bin", "python"), "-c",
		`import sys, importlib.metadata as m; sys.exit(0 if m.entry_points(group="opentelemetry_context", name="spanprof") else 1)`)
	pySDK := pyCheck.Run() == nil
	if !pySDK {
		t.Logf("no spanprof runtime context (entry point opentelemetry_context/spanprof) in %s (pip install ./sdk/python): "+
			"the Python service runs with OpenTelemetry's default context; its link checks are skipped", venv)
	}

	dir := t.TempDir()
	spanprof, gosvc, _ := build(t, dir)
	logSteal(t)
	classes := filepath.Join(dir, "java")
	var cp []string
	for _, j := range strings.Split(javaAPIJars, ":") {
		cp = append(cp, filepath.Join(work, j))
	}
	if out, err := exec.Command(javac, "-d", classes, "-cp", strings.Join(cp, ":"),
		filepath.Join(root, "testdata/tracework/javaservice/JavaService.java")).CombinedOutput(); err != nil {
		t.Fatalf("compile JavaService: %v\n%s", err, out)
	}
	col := collectorBin(t, root, dir)
	serveOTLP, webAddr, colAddr, colHTTP := freePort(t), freePort(t), freePort(t), freePort(t)
	srv := start(t, spanprof, "serve", "--listen", webAddr, "--otlp-listen", serveOTLP)
	srv.line(t, "spanprof:")
	cfg := filepath.Join(dir, "collector.yaml")
	profiles := filepath.Join(dir, "profiles.jsonl")
	config := fmt.Sprintf(polyglotConfig, colAddr, colHTTP, serveOTLP, profiles)
	var stores *storeServes
	if store != "" {
		stores = startStores(t, spanprof)
		config = fmt.Sprintf(polyglotStoreConfig, colAddr, colHTTP, serveOTLP, stores.otlp, profiles)
	}
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, col, "--config", cfg, "--feature-gates=service.profilesSupport")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", colAddr); err == nil {
			c.Close()
			if c, err := net.Dial("tcp", colHTTP); err == nil {
				c.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("collector not listening within 20s")
		}
	}
	otelEnv := func(service string) []string {
		return []string{"OTEL_SERVICE_NAME=" + service, "OTEL_EXPORTER_OTLP_ENDPOINT=http://" + colHTTP,
			"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_TRACES_EXPORTER=otlp", "OTEL_METRICS_EXPORTER=none",
			"OTEL_LOGS_EXPORTER=none", "OTEL_BSP_SCHEDULE_DELAY=200"}
	}
	pyEnv := append(otelEnv("python-service"), "PYTHONPERFSUPPORT=1", "PYTHONUNBUFFERED=1")
	if pySDK {
		pyEnv = append(pyEnv, "OTEL_PYTHON_CONTEXT=spanprof")
	}
	py := startEnv(t, pyEnv, filepath.Join(venv, "bin", "opentelemetry-instrument"), filepath.Join(venv, "bin", "python"),
		filepath.Join(root, "testdata/tracework/pyservice/pyservice.py"))
	pf := py.line(t, "ready")
	jargs := []string{"-XX:+PreserveFramePointer", "-javaagent:" + filepath.Join(work, javaAgentJar)}
	if javaSDK {
		jargs = append(jargs, "-Dotel.javaagent.extensions="+ext)
	}
	jargs = append(jargs, "-cp", classes+":"+strings.Join(cp, ":"), "JavaService")
	jv := startEnv(t, otelEnv("java-service"), java, jargs...)
	jf := jv.line(t, "ready")
	truths := &truthLog{spans: map[string][]spanTruth{}}
	truths.follow(py, "python-service")
	truths.follow(jv, "java-service")
	g := start(t, gosvc, "-endpoint", colAddr, "-next-url", "http://127.0.0.1:"+jf[2]+"/work")
	gpid := g.line(t, "ready")[1]
	pids := map[string]string{"go-service": gpid, "java-service": jf[1], "python-service": pf[1]}
	metricsAddr := freePort(t)
	// Every wait captured (--off-cpu-threshold 1ns): at the default 2 ms a
	// wait that follows the thread's previous one by less is captured with
	// probability cycle/2ms and weighted, unbiased in sums but not per
	// span, and one sleep is a span's whole known wait here (the JVM's
	// threads block at safepoints, Python's for the GIL, just before).
	start(t, spanprof, "agent", "--endpoint", colAddr, "--insecure", "--pid", gpid, "--pid", jf[1], "--pid", pf[1],
		"--off-cpu", "--off-cpu-threshold", "1ns", "--frequency", onCPUHz, "--go-wait-frequency", "199", "--report-interval", "1s",
		"--metrics-listen", metricsAddr)
	defer logLosses(t, metricsAddr)

	pyURL := "http://127.0.0.1:" + pf[2] + "/work"
	// req runs one trace: Go's, Java's and Python's CPU and sleep in ms.
	req := func(goCPU, goSleep, jCPU, jSleep, pCPU, pSleep int) (string, []spanTruth) {
		next := fmt.Sprintf("%s?cpu_ms=%d&sleep_ms=%d", pyURL, pCPU, pSleep)
		q := url.Values{"cpu_ms": {fmt.Sprint(jCPU)}, "sleep_ms": {fmt.Sprint(jSleep)}, "next": {next}}.Encode()
		fmt.Fprintf(g.in, "req %d %d %s\n", goCPU, goSleep, q)
		var spans []spanTruth
		for {
			f := g.line2(t)
			switch f[0] {
			case "truth":
				st := spanTruth{truth: parseTruth(f[2], f[3:6]), service: "go-service", span: f[1]}
				if len(f) == 9 {
					fmt.Sscan(f[6], &st.tid)
					fmt.Sscan(f[7], &st.start)
					fmt.Sscan(f[8], &st.end)
				}
				spans = append(spans, st)
			case "done":
				for i := range spans {
					spans[i].trace = f[1]
				}
				spans = append(spans, truths.wait(t, f[1], "java-service", 3)...)
				spans = append(spans, truths.wait(t, f[1], "python-service", 2)...)
				return f[1], spans
			}
		}
	}
	// Warm up until every runtime's samples reach serve: linked to its
	// spans where its SDK is there, the JNI library and the Python
	// extension being found by the agent's rescans after they load.
	deadline := time.Now().Add(100 * time.Second)
	for warm := 0; ; warm++ {
		if time.Now().After(deadline) {
			t.Fatal("no linked samples of every service reached serve through the collector within 100s")
		}
		tr, _ := req(60, 20, 60, 20, 60, 20)
		time.Sleep(1500 * time.Millisecond)
		tv, ok := getTrace(t, webAddr, tr)
		if ok && sampled(tv, "go cpu") && (!javaSDK || sampled(tv, "java cpu")) && (!pySDK || sampled(tv, "python cpu")) &&
			exported(tv, "java cpu") && exported(tv, "python cpu") {
			t.Logf("agent ready after %d warm-up requests", warm+1)
			break
		}
	}
	want := map[string]map[string]truth{}
	all := map[string][]spanTruth{}
	var first string
	for _, w := range [][6]int{{250, 150, 200, 250, 150, 200}, {100, 300, 300, 120, 250, 100}, {80, 120, 100, 100, 80, 150}} {
		tr, spans := req(w[0], w[1], w[2], w[3], w[4], w[5])
		all[tr] = spans
		if first == "" {
			first = tr
		}
	}
	linked := map[string]bool{"go-service": true, "java-service": javaSDK, "python-service": pySDK}
	for tr, spans := range all {
		want[tr] = map[string]truth{}
		for _, s := range spans {
			// The Java call's wait is judged on its thread below: the
			// agent's client span under it is current while it waits.
			if linked[s.service] && s.name != "java-call" {
				want[tr][s.span] = s.truth
			}
		}
	}
	settle(t, webAddr, want)
	minChecked := 3 * 3 // per trace: go cpu, go sleep, go call
	if javaSDK {
		minChecked += 3 * 2
	}
	if pySDK {
		minChecked += 3 * 2
	}
	checkKnownWork(t, webAddr, want, minChecked)
	for tr, spans := range all {
		tv, _ := getTrace(t, webAddr, tr)
		checkPolyglotNames(t, tr, tv)
		if javaSDK {
			for _, s := range spans {
				if s.name == "java-call" {
					checkCallWait(t, tr, tv, s)
				}
			}
		}
	}
	// Every sample against the services' account: linked where the
	// runtime's SDK is there; and, whether linked or not, the time each
	// thread spent on and off CPU within each span's bounds.
	samples := readProfileLines(t, profiles)
	names := map[string]string{} // span id → name, of the measured traces
	for tr := range all {
		tv, _ := getTrace(t, webAddr, tr)
		for _, s := range tv.Spans {
			if s.Exported {
				names[s.SpanID] = s.Name
			}
		}
	}
	for _, svc := range []string{"go-service", "java-service", "python-service"} {
		var pid int64
		fmt.Sscan(pids[svc], &pid)
		var mine []gt.Sample
		for _, s := range samples {
			if s.PID == pid {
				mine = append(mine, s)
			}
		}
		byTID := map[int][]gt.Span{}
		var spans []spanTruth
		for _, ss := range all {
			for _, s := range ss {
				if s.service == svc && s.tid != 0 {
					spans = append(spans, s)
					if s.name == "java-call" {
						// Its waits carry the agent's client span under
						// it, current in HttpClient.send: judged by
						// checkCallWait.
						continue
					}
					byTID[s.tid] = append(byTID[s.tid], gt.Span{TID: s.tid, Trace: s.trace, Span: s.span,
						Start: uint64(s.start), End: uint64(s.end), Held: uint64(s.start), Released: uint64(s.end)})
				}
			}
		}
		checkWindowTimes(t, svc, mine, spans, !linked[svc])
		if linked[svc] && svc != "go-service" {
			checkSpanNames(t, svc, mine, names)
		}
		for _, kind := range []string{"samples", "off_cpu"} {
			var of []gt.Sample
			for _, s := range mine {
				if s.Kind != kind {
					continue
				}
				if kind == "off_cpu" {
					// A wait is inside a span when its middle is: its
					// time is when it ended (the thread ran again), its
					// value how long it took.
					s.Times = slices.Clone(s.Times)
					for i := range s.Times {
						if i < len(s.Values) {
							s.Times[i] -= uint64(s.Values[i] / 2)
						}
					}
				}
				of = append(of, s)
			}
			c := gt.MeasureCorrelation(of, byTID)
			t.Logf("%-14s %-7s events inside its spans: %4d, carrying the span's ids %5.1f %%", svc, kind, c.InSpan, 100*c.Recall())
			// Enough to judge: every on-CPU sample of the bursts, and
			// every sleep's wait.
			least := 50
			if kind == "off_cpu" {
				least = 3
			}
			switch {
			case !linked[svc]:
				t.Logf("%s: link checks skipped: its SDK is missing (see above)", svc)
			case svc == "go-service" && kind == "off_cpu":
				// A parked goroutine's thread runs no goroutine while it
				// waits; the goroutine sampler reports the wait (tid 0),
				// judged in the spans' figures above.
			case c.InSpan < least:
				t.Errorf("%s %s: only %d events inside the spans (%s)", svc, kind, c.InSpan, c.Ranges())
			case c.Recall() < 0.99:
				t.Errorf("%s %s: %.1f %% of %d events inside a span carry its ids, want ≥ 99 %%", svc, kind, 100*c.Recall(), c.InSpan)
			}
		}
	}
	if stores != nil {
		webAddr = stores.check(t, webAddr, want)
	}
	if shot := os.Getenv("SPANPROF_TRACE_SCREENSHOT"); shot != "" {
		screenshotTrace(t, webAddr, first, shot)
	}
}

func exported(tv live.TraceView, name string) bool {
	for _, s := range tv.Spans {
		if s.Name == name && s.Exported {
			return true
		}
	}
	return false
}

// checkPolyglotNames checks that the view shows every service's spans by
// name: the SDK's and the API's own, and the agents' server and client
// spans.
func checkPolyglotNames(t *testing.T, tr string, tv live.TraceView) {
	t.Helper()
	have := map[[2]string]bool{}
	for _, s := range tv.Spans {
		if s.Exported {
			have[[2]string{s.Service, s.Name}] = true
		}
	}
	for _, w := range [][2]string{
		{"go-service", "handle request"}, {"go-service", "go cpu"}, {"go-service", "go sleep"}, {"go-service", "call next"},
		{"java-service", "GET /work"}, {"java-service", "java cpu"}, {"java-service", "java sleep"}, {"java-service", "java call"},
		{"java-service", "GET"}, {"python-service", "GET /work"}, {"python-service", "python cpu"}, {"python-service", "python sleep"},
	} {
		if !have[w] {
			t.Errorf("trace %s: no span %q of %s in the view (have %v)", tr, w[1], w[0], have)
		}
	}
}

// checkCallWait judges the Java call's wait: on its thread, within the
// "java call" span or the agent's client span under it, which is current
// while HttpClient.send waits for the answer.
func checkCallWait(t *testing.T, tr string, tv live.TraceView, call spanTruth) {
	t.Helper()
	var off int64
	for _, s := range tv.Spans {
		if s.SpanID != call.span && s.ParentSpanID != call.span {
			continue
		}
		for _, th := range s.ByThread {
			if int(th.TID) == call.tid {
				off += th.OffCPUNs
			}
		}
	}
	e := float64(off-call.waitNs) / float64(call.waitNs)
	t.Logf("java-call (and its client span) off-CPU on its thread %8.1f ms, known %8.1f ms, error %+6.1f %%",
		float64(off)/1e6, float64(call.waitNs)/1e6, 100*e)
	if call.waitNs >= 50e6 && math.Abs(e) > 0.10 {
		t.Errorf("trace %s: java call's wait %.1f ms off-CPU on its thread, known %.1f ms (%+.1f %%)", tr,
			float64(off)/1e6, float64(call.waitNs)/1e6, 100*e)
	}
}

// checkSpanNames checks the span.name attribute (key 0 of the SDKs'
// attribute key map) on the samples linked to the measured traces' spans:
// the name of the span whose ids they carry.
func checkSpanNames(t *testing.T, svc string, samples []gt.Sample, names map[string]string) {
	t.Helper()
	linked, right := 0, 0
	wrong := map[string]int{} // "shown name ← the samples' span.name"
	for _, s := range samples {
		name, ok := names[s.Span]
		if !ok {
			continue
		}
		n := max(len(s.Times), 1)
		linked += n
		if s.Attrs["span.name"] == name {
			right += n
		} else {
			wrong[fmt.Sprintf("%q <- %q (%s)", name, s.Attrs["span.name"], s.Kind)] += n
		}
	}
	if len(wrong) > 0 {
		t.Logf("%s: linked events whose span.name is not the span's exported name: %v", svc, wrong)
	}
	t.Logf("%-14s span.name right on %d of %d events linked to the measured spans (%.1f %%)", svc, right, linked, gt.Pct(right, linked))
	if linked < 50 || gt.Pct(right, linked) < 99 {
		t.Errorf("%s: span.name right on %d of %d linked events, want ≥ 99 %% of at least 50", svc, right, linked)
	}
}

// readProfileLines reads the collector's profile file, one OTLP/JSON
// batch a line.
func readProfileLines(t *testing.T, path string) []gt.Sample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the collector's profiles: %v", err)
	}
	var out []gt.Sample
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<28)
	for sc.Scan() {
		var u pprofile.JSONUnmarshaler
		pd, err := u.UnmarshalProfiles(sc.Bytes())
		if err != nil {
			t.Fatalf("unmarshal a batch of %s: %v", path, err)
		}
		out = append(out, gt.Samples(pd)...)
	}
	return out
}

// checkWindowTimes sums, per span, the time its thread was sampled on CPU
// and off CPU within the span's bounds, linked or not, and compares it
// with the known work (±10 % for figures of at least 50 ms). It checks
// the profiler saw each runtime's threads work and wait at the right
// times; judged (strict) only where the span figures cannot be, for a
// runtime whose SDK is missing, logged otherwise.
func checkWindowTimes(t *testing.T, svc string, samples []gt.Sample, spans []spanTruth, strict bool) {
	t.Helper()
	period := int64(time.Second) / 999
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	for _, sp := range spans {
		var on, off int64
		var events []string
		for _, s := range samples {
			var tid int
			fmt.Sscan(s.Attrs["thread.id"], &tid)
			if tid != sp.tid {
				continue
			}
			for i, ts := range s.Times {
				t0 := int64(ts)
				switch s.Kind {
				case "samples":
					if t0 >= sp.start && t0 < sp.end {
						on += period
					}
				case "off_cpu":
					if i >= len(s.Values) {
						continue
					}
					// An off-CPU event's time is when the thread ran
					// again (bpf/lib/offcpu.h stamps the record at switch-in);
					// its value is how long it stayed off.
					b0 := t0 - s.Values[i]
					w0, w1 := max(b0, sp.start), min(t0, sp.end)
					if w1 > w0 {
						off += w1 - w0
						events = append(events, fmt.Sprintf("[%+.1f, %+.1f] ms of the span's start (%s, %s, %s, link %s)",
							float64(b0-sp.start)/1e6, float64(t0-sp.start)/1e6, s.Attrs["off_cpu.reason"],
							s.Attrs["thread.name"], s.Attrs["thread.state"], s.Span))
					}
				}
			}
		}
		for _, m := range []struct {
			what      string
			got, want int64
		}{{"on-CPU", on, sp.onCPU()}, {"off-CPU", off, sp.waitNs}} {
			if m.want < 50e6 {
				continue
			}
			e := float64(m.got-m.want) / float64(m.want)
			t.Logf("%-14s %-12s %-7s on its thread in its bounds %8.1f ms, known %8.1f ms, error %+6.1f %%", svc, sp.name, m.what,
				float64(m.got)/1e6, float64(m.want)/1e6, 100*e)
			if m.what == "off-CPU" && math.Abs(e) > 0.10 {
				t.Logf("%s %s (%.1f ms): its thread's waits: %s", svc, sp.name, float64(sp.end-sp.start)/1e6, strings.Join(events, "; "))
			}
			if strict && math.Abs(e) > 0.10 {
				t.Errorf("%s span %s %s: %s %.1f ms on its thread within its bounds, known %.1f ms (%+.1f %%)", svc, sp.span, sp.name,
					m.what, float64(m.got)/1e6, float64(m.want)/1e6, 100*e)
			}
		}
	}
}
