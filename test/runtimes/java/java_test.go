// Package java runs real JVMs whose OpenTelemetry spans are published by
// sdk/java (the agent extension, and SDK autoconfigure alone) under
// `spanprof record`, and checks every sample's link against the truth the
// workload wrote down (testdata/SpanWork.java). Needs root: spanprof loads
// eBPF programs.
package java

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/test/truth"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

var jdks = map[string]string{
	"17": "/usr/lib/jvm/java-17-openjdk-amd64",
	"25": "/usr/lib/jvm/temurin-25-jdk-amd64",
}

// setup builds spanprof, the sdk/java jar (make java-sdk: Maven fetches
// the pinned agent and SDK) and the workload; it returns the binary, the
// sdk/java build directory and the workload's classes.
func setup(t *testing.T) (bin, build, classes string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF programs")
	}
	if _, err := os.Stat(filepath.Join(jdks["17"], "bin", "javac")); err != nil {
		t.Skipf("no JDK 17 at %s", jdks["17"])
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", "..", ".."))
	build = filepath.Join(root, "sdk", "java", "build")
	if _, err := os.Stat(filepath.Join(build, "spanprof-otel.jar")); err != nil {
		if out, err := exec.Command("make", "-C", root, "java-sdk").CombinedOutput(); err != nil {
			t.Fatalf("make java-sdk: %v\n%s", err, out)
		}
	}
	dir := t.TempDir()
	bin = filepath.Join(dir, "spanprof")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "spanprof")).CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	classes = filepath.Join(dir, "classes")
	javac := exec.Command(filepath.Join(jdks["17"], "bin", "javac"), "--release", "17", "-d", classes,
		"-cp", filepath.Join(build, "sdk-lib", "*"), filepath.Join(filepath.Dir(self), "testdata", "SpanWork.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac SpanWork: %v\n%s", err, out)
	}
	return bin, build, classes
}

func TestJavaThreadContext(t *testing.T) {
	bin, build, classes := setup(t)
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
			java := filepath.Join(jdks[v.jdk], "bin", "java")
			if _, err := os.Stat(java); err != nil {
				t.Skipf("no Java %s at %s", v.jdk, jdks[v.jdk])
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
			appErr := runRecorded(t, bin, app, out, warm+measure+20)
			tr := readTruth(t, truthPath)
			samples, err := truth.ReadOTLP(out)
			if err != nil {
				t.Fatal(err)
			}
			// otel.service.name is a system property, not in the
			// environment: only the process context the extension
			// published from the SDK's resource can name the service.
			if got := serviceNames(t, out); len(got) != 1 || got[0] != "spanwork-"+v.name {
				t.Errorf("service.name of the profiles %q, want [spanwork-%s] (from the process context)", got, v.name)
			}
			c := score(samples, tr)
			t.Logf("%s: in-span samples %d, with their span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d; span.name right on %d/%d linked, http.route right on %d/%d",
				v.name, c.inSpan, c.inSpanRight, truth.Pct(c.inSpanRight, c.inSpan), c.linked, c.wrong, truth.Pct(c.wrong, c.linked),
				c.gap, c.gapLinked, c.nameRight, c.linkedRight, c.routeRight, c.linkedRight)
			if c.firstLink > 0 {
				// Mode sdk loads the JNI library at set-up, while spanprof
				// records (a late dlopen); the agent loads it at JVM start.
				what := "the SDK set-up (the JNI library's late load)"
				if v.mode == "agent" {
					what = "the workload's go (the library loaded at JVM start)"
				}
				t.Logf("%s: first linked sample %v after %s", v.name,
					time.Duration(int64(c.firstLink-tr.setup)).Round(time.Millisecond), what)
			}
			if c.inSpan < 500 {
				t.Fatalf("only %d samples inside span windows; app stderr:\n%s", c.inSpan, appErr)
			}
			if p := truth.Pct(c.inSpanRight, c.inSpan); p < 99 {
				t.Errorf("%.3f%% of in-span samples carry their span's ids, want ≥ 99%%", p)
			}
			if p := truth.Pct(c.wrong, c.linked); p >= 0.1 {
				t.Errorf("%.3f%% of linked samples are wrong, want < 0.1%%", p)
			}
			if c.gap < 100 || c.gapLinked > 0 {
				t.Errorf("%d of %d samples outside spans are linked, want 0 (of ≥ 100)", c.gapLinked, c.gap)
			}
			if p := truth.Pct(c.nameRight, c.linkedRight); p < 99 {
				t.Errorf("span.name right on %.3f%% of rightly linked samples, want ≥ 99%%", p)
			}
			if p := truth.Pct(c.routeRight, c.linkedRight); p < 99 {
				t.Errorf("http.route right (present on root spans only) on %.3f%%, want ≥ 99%%", p)
			}
			stats := statsLine(appErr)
			t.Logf("%s: %s", v.name, stats)
			if !strings.Contains(stats, "thread context published") {
				t.Errorf("the extension did not wrap the context storage: %q", stats)
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

// runRecorded starts app, records it with spanprof from before its "go"
// (so the SDK set-up, the library's late load, lies inside the recording)
// until it exits, and returns the app's stderr.
func runRecorded(t *testing.T, bin string, app *exec.Cmd, out string, maxSeconds int) string {
	t.Helper()
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
		app.Process.Kill()
		app.Wait()
		t.Fatalf("workload first line %q: %v\n%s", line, err, appErr.String())
	}
	go io.Copy(io.Discard, appOut)
	rec := exec.Command(bin, "record", "--pid", fmt.Sprint(app.Process.Pid), "--frequency", "999",
		"--duration", fmt.Sprintf("%ds", maxSeconds), "--output", out)
	recErr, err := rec.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Process.Kill(); rec.Wait() })
	var log strings.Builder
	sc := bufio.NewScanner(recErr)
	for sc.Scan() {
		log.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "spanprof: recording") {
			break
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
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
	rec.Process.Signal(syscall.SIGINT) // Ctrl-C: write the output now
	<-done
	if err := rec.Wait(); err != nil {
		t.Fatalf("spanprof record: %v\n%s", err, log.String())
	}
	t.Logf("spanprof record:\n%s", log.String())
	return appErr.String()
}

// serviceNames returns the service.name of each resource in an OTLP/JSON
// file.
func serviceNames(t *testing.T, path string) []string {
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
	var names []string
	for _, rp := range pd.ResourceProfiles().All() {
		v, _ := rp.Resource().Attributes().Get("service.name")
		names = append(names, v.AsString())
	}
	return names
}

func statsLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "spanprof-otel: thread context") {
			return l
		}
	}
	return "(no spanprof-otel line on the workload's stderr)"
}
