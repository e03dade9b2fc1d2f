package java

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/test/truth"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress
)

// sink is an OTLP/gRPC profiles endpoint on loopback keeping the samples
// and resource service names the agent sends.
type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu       sync.Mutex
	samples  []truth.Sample
	services []string
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	got := truth.Samples(req.Profiles())
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, got...)
	for _, rp := range req.Profiles().ResourceProfiles().All() {
		name := "" // absent: kept, so a check of the names sees it
		if v, ok := rp.Resource().Attributes().Get("service.name"); ok {
			name = v.AsString()
		}
		s.services = append(s.services, name)
	}
	return pprofileotlp.NewExportResponse(), nil
}

// RunAgent starts app (a workload that prints "pid N", then waits for
// "go" on stdin), runs `spanprof agent --pid` on it exporting to a sink
// in the test, sends "go" once the agent has started, waits for the app
// to end and for the agent's last report (SIGTERM flushes what it
// holds), and returns the samples and service names the sink received
// and the app's stderr.
func RunAgent(t *testing.T, bin string, app *exec.Cmd) ([]truth.Sample, []string, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	s := &sink{}
	pprofileotlp.RegisterGRPCServer(srv, s)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)

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

	agent := exec.Command(bin, "agent", "--endpoint", ln.Addr().String(), "--insecure",
		"--pid", fmt.Sprint(app.Process.Pid), "--frequency", "999", "--report-interval", "1s", "--metrics-listen", "off")
	pipe, err := agent.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	agent.Stdout = io.Discard
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	var log strings.Builder
	var logMu sync.Mutex
	logged := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pipe)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "agent started") {
				once.Do(func() { close(started) })
			}
		}
	}()
	select {
	case <-started:
	case <-done:
		t.Fatalf("spanprof agent ended before it started:\n%s", logged())
	case <-time.After(120 * time.Second):
		t.Fatalf("spanprof agent did not start within 120s:\n%s", logged())
	}
	// The workload's warm-up covers the agent's first scan and reports:
	// only the measured seconds after it are scored.
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := app.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, appErr.String())
	}
	time.Sleep(3 * time.Second) // the last interval's report
	agent.Process.Signal(syscall.SIGTERM)
	<-done
	if err := agent.Wait(); err != nil {
		t.Fatalf("spanprof agent: %v\n%s", err, logged())
	}
	t.Logf("spanprof agent:\n%s", lastLines(logged(), 15))
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, s.services, appErr.String()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
