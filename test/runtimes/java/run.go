package java

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

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
