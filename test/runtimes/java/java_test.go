// Package java runs real JVMs whose OpenTelemetry spans are published by
// sdk/java (the agent extension, and SDK autoconfigure alone) under
// `spanprof record`, and checks every sample's link against the truth the
// workload wrote down (testdata/SpanWork.java). Needs root: spanprof loads
// eBPF programs.
package java

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/test/truth"
)

func TestJavaThreadContext(t *testing.T) {
	bin, build, classes := Setup(t)
	lib := func(jar string) string { return filepath.Join(build, "sdk-lib", jar+"-1.65.0.jar") }
	for _, v := range []struct {
		name, jdk, mode string
		virtual         bool
	}{
		{"agent-java17", "17", "agent", false},
		{"agent-java25", "25", "agent", true},
		{"sdk-java17", "17", "sdk", false},
		{"sdk-java25", "25", "sdk", true},
	} {
		t.Run(v.name, func(t *testing.T) {
			java := filepath.Join(JDKs[v.jdk], "bin", "java")
			if _, err := os.Stat(java); err != nil {
				t.Skipf("no Java %s at %s", v.jdk, JDKs[v.jdk])
			}
			args := []string{"-XX:+PreserveFramePointer", "-Dotel.service.name=spanwork-" + v.name,
				"-Dotel.traces.exporter=none", "-Dotel.metrics.exporter=none", "-Dotel.logs.exporter=none"}
			var cp []string
			if v.mode == "agent" {
				// The application itself carries only the API: the agent
				// bridges it and runs the extension.
				args = append(args, "-javaagent:"+filepath.Join(build, "opentelemetry-javaagent.jar"),
					"-Dotel.javaagent.extensions="+filepath.Join(build, "spanprof-otel.jar"))
				cp = []string{classes, lib("opentelemetry-api"), lib("opentelemetry-context"), lib("opentelemetry-common")}
			} else {
				cp = []string{classes, filepath.Join(build, "sdk-lib", "*"), filepath.Join(build, "spanprof-otel.jar")}
			}
			truthPath := filepath.Join(t.TempDir(), "truth")
			out := filepath.Join(t.TempDir(), "java.otlp.json")
			const warm, measure = 6, 6
			wargs := []string{"SpanWork", v.mode, truthPath, "3", fmt.Sprint(warm), fmt.Sprint(measure)}
			if v.virtual {
				wargs = append(wargs, "virtual")
			}
			app := exec.Command(java, append(append(args, "-cp", strings.Join(cp, ":")), wargs...)...)
			appErr := RunRecorded(t, bin, app, out, warm+measure+20)
			tr := ReadTruth(t, truthPath)
			samples, err := truth.ReadOTLP(out)
			if err != nil {
				t.Fatal(err)
			}
			// otel.service.name is a system property, not in the
			// environment: only the process context the extension
			// published from the SDK's resource can name the service.
			if got := ServiceNames(t, out); len(got) != 1 || got[0] != "spanwork-"+v.name {
				t.Errorf("service.name of the profiles %q, want [spanwork-%s] (from the process context)", got, v.name)
			}
			c := Score(samples, tr)
			t.Logf("%s: in-span samples %d, with their span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d; span.name right on %d/%d linked, http.route right on %d/%d",
				v.name, c.InSpan, c.InSpanRight, truth.Pct(c.InSpanRight, c.InSpan), c.Linked, c.Wrong, truth.Pct(c.Wrong, c.Linked),
				c.Gap, c.GapLinked, c.NameRight, c.LinkedRight, c.RouteRight, c.LinkedRight)
			if c.FirstLink > 0 {
				// Mode sdk loads the JNI library at set-up, while spanprof
				// records (a late dlopen); the agent loads it at JVM start.
				what := "the SDK set-up (the JNI library's late load)"
				if v.mode == "agent" {
					what = "the workload's go (the library loaded at JVM start)"
				}
				t.Logf("%s: first linked sample %v after %s", v.name,
					time.Duration(int64(c.FirstLink-tr.Setup)).Round(time.Millisecond), what)
			}
			if c.InSpan < 500 {
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
			if p := truth.Pct(c.NameRight, c.LinkedRight); p < 99 {
				t.Errorf("span.name right on %.3f%% of rightly linked samples, want ≥ 99%%", p)
			}
			if p := truth.Pct(c.RouteRight, c.LinkedRight); p < 99 {
				t.Errorf("http.route right (present on root spans only) on %.3f%%, want ≥ 99%%", p)
			}
			stats := statsLine(appErr)
			t.Logf("%s: %s", v.name, stats)
			if !strings.Contains(stats, "thread context published") {
				t.Errorf("the extension did not wrap the context storage: %q", stats)
			}
			if !strings.Contains(stats, "records built at span start") {
				t.Errorf("the extension's span processor built no record at span start: %q", stats)
			}
			var n int
			if i := strings.Index(stats, " virtual-thread attaches not published"); i > 0 {
				f := strings.Fields(stats[:i])
				fmt.Sscan(f[len(f)-1], &n)
			}
			if v.virtual != (n > 0) {
				t.Errorf("%d virtual-thread attaches counted, want them counted exactly when the workload runs a virtual thread (%v)", n, v.virtual)
			}
		})
	}
}

func statsLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "spanprof-otel: thread context") {
			return l
		}
	}
	return "(no spanprof-otel line on the workload's stderr)"
}
