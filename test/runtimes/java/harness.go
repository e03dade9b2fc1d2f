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

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/testutil"
)

// JDKs are the JDKs the Java tests run on, by major version.
var JDKs = map[string]string{
	"17": "/usr/lib/jvm/java-17-openjdk-amd64",
	"25": "/usr/lib/jvm/temurin-25-jdk-amd64",
}

// Setup builds spanprof, the sdk/java jar (make java-sdk: Maven fetches
// the pinned agent and SDK) and the workload; it returns the binary, the
// sdk/java build directory and the workload's classes.
func Setup(t *testing.T) (bin, build, classes string) {
	t.Helper()
	testutil.RequireRoot(t)
	if _, err := os.Stat(filepath.Join(JDKs["17"], "bin", "javac")); err != nil {
		t.Skipf("no JDK 17 at %s", JDKs["17"])
	}
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", "..", ".."))
	build = filepath.Join(root, "sdk", "java", "build")
	if _, err := os.Stat(filepath.Join(build, "spanprof-otel.jar")); err != nil {
		if _, err := testutil.Make(".", "java-sdk"); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin = filepath.Join(dir, "spanprof")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "spanprof")).CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	classes = filepath.Join(dir, "classes")
	javac := exec.Command(filepath.Join(JDKs["17"], "bin", "javac"), "--release", "17", "-d", classes,
		"-cp", filepath.Join(build, "sdk-lib", "*"), filepath.Join(filepath.Dir(self), "testdata", "SpanWork.java"))
	if out, err := javac.CombinedOutput(); err != nil {
		t.Fatalf("javac SpanWork: %v\n%s", err, out)
	}
	return bin, build, classes
}

// RunRecorded starts app, records it with spanprof from before its "go"
// (so the SDK set-up, the library's late load, lies inside the recording)
// until it exits, and returns the app's stderr.
func RunRecorded(t *testing.T, bin string, app *exec.Cmd, out string, maxSeconds int) string {
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

// ServiceNames returns the service.name of each resource in an OTLP/JSON
// file.
func ServiceNames(t *testing.T, path string) []string {
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
