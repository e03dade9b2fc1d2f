// Package ddjava runs a real JVM under Datadog's Java agent (dd-java-agent,
// its profiler on) and checks that spanprof reads the OTEP 4947 thread
// context the agent's native profiler library (libjavaProfiler.so, which
// the agent extracts and loads when the profiler starts) keeps per thread:
// every sample's trace and span ids, and attribute 0, the local root span
// id, against the tracer's own view the workload writes down
// (testdata/DDWork.java). Both `spanprof record` and `spanprof agent`
// (exporting to an OTLP sink in this test) are judged. Needs root:
// spanprof loads eBPF programs.
package ddjava

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/runtimes/java"
	"github.com/spanprof/spanprof/test/truth"
)

// Version is the dd-java-agent the Makefile's writer-ddjava-deps fetches.
const Version = "1.68.1"

// otelVersion is the OpenTelemetry API the workload is written against;
// the agent bridges it to its own tracer.
const otelVersion = "1.65.0"

// lrsKey is the name the agent's profiler gives attribute 0 in its
// process context's key map.
const lrsKey = "datadog.local_root_span_id"

var jdks = map[string]string{
	"17": "/usr/lib/jvm/java-17-openjdk-amd64",
	"25": "/usr/lib/jvm/temurin-25-jdk-amd64",
}

func setup(t *testing.T) (bin, build, classes string) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := os.Stat(filepath.Join(jdks["17"], "bin", "javac")); err != nil {
		t.Skipf("no JDK 17 at %s", jdks["17"])
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", "..", ".."))
	build = filepath.Join(root, "testdata", "ddjava", "build")
	if _, err := os.Stat(filepath.Join(build, "dd-java-agent-"+Version+".jar")); err != nil {
		if _, err := testutil.Make(".", "writer-ddjava-deps"); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin = filepath.Join(dir, "spanprof")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "spanprof")).CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	classes = filepath.Join(dir, "classes")
	javac := exec.Command(filepath.Join(jdks["17"], "bin", "javac"), "--release", "17", "-d", classes,
		"-cp", strings.Join(apiJars(build), ":"), filepath.Join(filepath.Dir(self), "testdata", "DDWork.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac DDWork: %v\n%s", err, out)
	}
	return bin, build, classes
}

func apiJars(build string) []string {
	var jars []string
	for _, a := range []string{"opentelemetry-api", "opentelemetry-context", "opentelemetry-common"} {
		jars = append(jars, filepath.Join(build, a+"-"+otelVersion+".jar"))
	}
	return jars
}

// datadogSink is the loopback stand-in for the Datadog agent: it accepts
// whatever the tracer and profiler send (traces, profiles) and drops it.
func datadogSink(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// workload returns the JVM command: dd-java-agent with its profiler on
// from the start, the OpenTelemetry API bridged, everything else that
// would talk to a backend off, the rest pointed at the loopback sink.
func workload(jdk, build, classes, url, truthPath string, warm, measure int) *exec.Cmd {
	args := []string{"-XX:+PreserveFramePointer",
		"-javaagent:" + filepath.Join(build, "dd-java-agent-"+Version+".jar"),
		"-Ddd.service=ddwork", "-Ddd.trace.agent.url=" + url,
		"-Ddd.profiling.enabled=true", "-Ddd.profiling.start-delay=0", "-Ddd.profiling.start-force-first=true",
		"-Ddd.trace.otel.enabled=true",
		"-Ddd.trace.startup.logs=false", "-Ddd.jmxfetch.enabled=false", "-Ddd.instrumentation.telemetry.enabled=false",
		"-Ddd.remote_config.enabled=false", "-Ddd.data.streams.enabled=false",
		"-cp", strings.Join(append([]string{classes}, apiJars(build)...), ":"),
		"DDWork", truthPath, "3", fmt.Sprint(warm), fmt.Sprint(measure)}
	return exec.Command(filepath.Join(jdks[jdk], "bin", "java"), args...)
}

func TestDDJavaThreadContext(t *testing.T) {
	bin, build, classes := setup(t)
	url := datadogSink(t)
	for _, v := range []struct{ name, jdk, mode string }{
		{"record-java17", "17", "record"},
		{"agent-java17", "17", "agent"},
		{"record-java25", "25", "record"},
		// spanprof starts the JVM: the agent loads its profiler library
		// while spanprof records (a late dlopen, seen by the loader hook).
		{"launch-java17", "17", "launch"},
	} {
		t.Run(v.name, func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(jdks[v.jdk], "bin", "java")); err != nil {
				t.Skipf("no Java %s at %s", v.jdk, jdks[v.jdk])
			}
			truthPath := filepath.Join(t.TempDir(), "truth")
			const warm, measure = 5, 6
			app := workload(v.jdk, build, classes, url, truthPath, warm, measure)
			var samples []truth.Sample
			var appErr string
			var services []string
			if v.mode == "record" {
				out := filepath.Join(t.TempDir(), "ddjava.otlp.json")
				appErr = java.RunRecorded(t, bin, app, out, warm+measure+30)
				var err error
				if samples, err = truth.ReadOTLP(out); err != nil {
					t.Fatal(err)
				}
				services = java.ServiceNames(t, out)
			} else if v.mode == "launch" {
				samples, services, appErr = runLaunched(t, bin, app, warm+measure+60)
			} else {
				samples, services, appErr = java.RunAgent(t, bin, app)
			}
			// dd.service is a system property, not in the environment:
			// only the process context the agent's profiler publishes
			// names the service.
			slices.Sort(services)
			if services = slices.Compact(services); len(services) != 1 || services[0] != "ddwork" {
				t.Errorf("service.name of the profiles %q, want [ddwork] (from the process context)", services)
			}
			tr := java.ReadTruth(t, truthPath)
			c := java.ScoreAttr(samples, tr, lrsKey)
			t.Logf("%s: in-span samples %d, with their span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d; %s right on %d/%d rightly linked",
				v.name, c.InSpan, c.InSpanRight, truth.Pct(c.InSpanRight, c.InSpan), c.Linked, c.Wrong, truth.Pct(c.Wrong, c.Linked),
				c.Gap, c.GapLinked, lrsKey, c.RouteRight, c.LinkedRight)
			if c.FirstLink > 0 {
				t.Logf("%s: first linked sample %v after the workload's go", v.name,
					time.Duration(int64(c.FirstLink-tr.Setup)).Round(time.Millisecond))
			}
			if c.InSpan < 300 {
				t.Fatalf("only %d samples inside span windows; app stderr:\n%s", c.InSpan, appErr)
			}
			if p := truth.Pct(c.InSpanRight, c.InSpan); p < 99 {
				t.Errorf("%.3f%% of in-span samples carry their span's ids, want ≥ 99%%", p)
			}
			if p := truth.Pct(c.Wrong, c.Linked); p >= 0.1 {
				t.Errorf("%.3f%% of linked samples are wrong, want < 0.1%%", p)
			}
			if c.Gap < 100 || c.GapLinked > 0 {
				t.Errorf("%d of %d samples outside spans are linked, want 0 (of ≥ 100)", c.GapLinked, c.Gap)
			}
			if p := truth.Pct(c.RouteRight, c.LinkedRight); p < 99 {
				t.Errorf("%s (the local root span id) right on %.3f%% of rightly linked samples, want ≥ 99%%", lrsKey, p)
			}
		})
	}
}

// runLaunched has `spanprof record -- JAVA ARGS` start app (stdin "go"
// at once) and record it until it exits. The agent's profiler library is
// loaded after spanprof has looked at the process: the test requires the
// record log to count it as a new context source found on a library load.
func runLaunched(t *testing.T, bin string, app *exec.Cmd, maxSeconds int) ([]truth.Sample, []string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ddjava.otlp.json")
	rec := exec.Command(bin, append([]string{"record", "--frequency", "999", "--duration", fmt.Sprintf("%ds", maxSeconds),
		"--output", out, "--"}, app.Args...)...)
	rec.Stdin = strings.NewReader("go\n")
	var log strings.Builder
	rec.Stdout, rec.Stderr = io.Discard, &log
	if err := rec.Run(); err != nil {
		t.Fatalf("spanprof record -- java: %v\n%s", err, log.String())
	}
	t.Logf("spanprof record:\n%s", log.String())
	m := regexp.MustCompile(`found (\d+) new context sources`).FindStringSubmatch(log.String())
	if m == nil || m[1] == "0" {
		t.Errorf("the profiler library's late load was not counted as a new context source: %v", m)
	}
	samples, err := truth.ReadOTLP(out)
	if err != nil {
		t.Fatal(err)
	}
	return samples, java.ServiceNames(t, out), log.String()
}
