// Package elastic runs a real JVM under the real Elastic APM Java agent
// (universal_profiling_integration_enabled: the agent's JVMTI library,
// loaded after the JVM starts, publishes
// elastic_apm_profiling_correlation_tls_v1) and checks spanprof's links
// against the spans the agent itself reported to the workload
// (test/runtimes/java's SpanWork through the agent's OpenTelemetry
// bridge), under `spanprof record` and `spanprof agent`. Needs root.
package elastic

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/test/runtimes/java"
	"github.com/spanprof/spanprof/test/truth"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the agent may compress
)

// agentJar is the pinned agent (Makefile: writer-elastic-deps).
const agentJar = "elastic-apm-agent-1.55.1.jar"

func TestElasticThreadContext(t *testing.T) {
	bin, build, classes := java.Setup(t)
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Clean(filepath.Join(filepath.Dir(self), "..", "..", ".."))
	jar := filepath.Join(root, "testdata", "elastic", "build", agentJar)
	if _, err := os.Stat(jar); err != nil {
		if out, err := exec.Command("make", "-C", root, "writer-elastic-deps").CombinedOutput(); err != nil {
			t.Fatalf("make writer-elastic-deps: %v\n%s", err, out)
		}
	}
	lib := func(a string) string { return filepath.Join(build, "sdk-lib", a+"-1.65.0.jar") }
	for _, mode := range []string{"record", "agent"} {
		t.Run(mode, func(t *testing.T) {
			tmp := t.TempDir()
			sock := filepath.Join(tmp, "sock")
			if err := os.Mkdir(sock, 0o700); err != nil {
				t.Fatal(err)
			}
			// Nothing leaves the machine: no intake (disable_send, and a
			// loopback server_url nobody listens on), no cloud metadata
			// probe, no central config; the agent logs to a file.
			args := []string{"-XX:+PreserveFramePointer", "-javaagent:" + jar,
				"-Delastic.apm.service_name=spanwork-elastic",
				"-Delastic.apm.server_url=http://127.0.0.1:9", "-Delastic.apm.disable_send=true",
				"-Delastic.apm.central_config=false", "-Delastic.apm.cloud_provider=none",
				"-Delastic.apm.metrics_interval=0s", "-Delastic.apm.log_level=info",
				"-Delastic.apm.log_file=" + filepath.Join(tmp, "agent.log"),
				"-Delastic.apm.universal_profiling_integration_enabled=true",
				"-Delastic.apm.universal_profiling_integration_socket_dir=" + sock,
				"-cp", strings.Join([]string{classes, lib("opentelemetry-api"), lib("opentelemetry-context"), lib("opentelemetry-common")}, ":")}
			truthPath := filepath.Join(tmp, "truth")
			const warm, measure = 6, 6
			app := exec.Command(filepath.Join(java.JDKs["17"], "bin", "java"),
				append(args, "SpanWork", "agent", truthPath, "3", fmt.Sprint(warm), fmt.Sprint(measure))...)
			var samples []truth.Sample
			var appErr string
			if mode == "record" {
				out := filepath.Join(tmp, "elastic.otlp.json")
				appErr = java.RunRecorded(t, bin, app, out, warm+measure+60)
				var err error
				if samples, err = truth.ReadOTLP(out); err != nil {
					t.Fatal(err)
				}
			} else {
				samples, appErr = runAgent(t, bin, app)
			}
			tr := java.ReadTruth(t, truthPath)
			c := java.Score(samples, tr)
			t.Logf("%s: in-span samples %d, with their span's ids %d (%.3f%%); linked %d, wrong %d (%.3f%%); in gaps %d, linked %d",
				mode, c.InSpan, c.InSpanRight, truth.Pct(c.InSpanRight, c.InSpan), c.Linked, c.Wrong,
				truth.Pct(c.Wrong, c.Linked), c.Gap, c.GapLinked)
			if c.InSpan < 500 {
				log, _ := os.ReadFile(filepath.Join(tmp, "agent.log"))
				t.Fatalf("only %d samples inside span windows; app stderr:\n%s\nagent log:\n%s", c.InSpan, appErr, log)
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
			// Every linked sample names its local root span, the trace's
			// root (the agent's transaction), in transaction.id.
			roots := tr.RootSpans("work.root")
			var linked, rootRight int
			for _, s := range samples {
				if s.Kind != "samples" || s.Trace == "" {
					continue
				}
				want, ok := roots[s.Trace]
				if !ok {
					continue // a trace outside the written-down rounds
				}
				linked += len(s.Times)
				if s.Attrs["transaction.id"] == want {
					rootRight += len(s.Times)
				}
			}
			t.Logf("%s: transaction.id right on %d of %d linked samples", mode, rootRight, linked)
			if linked == 0 || rootRight != linked {
				t.Errorf("transaction.id right on %d of %d linked samples, want all", rootRight, linked)
			}
		})
	}
}

// sink is an OTLP/gRPC profiles endpoint on loopback keeping what the
// agent sends.
type sink struct {
	pprofileotlp.UnimplementedGRPCServer
	mu      sync.Mutex
	samples []truth.Sample
}

func (s *sink) Export(_ context.Context, req pprofileotlp.ExportRequest) (pprofileotlp.ExportResponse, error) {
	got := truth.Samples(req.Profiles())
	s.mu.Lock()
	s.samples = append(s.samples, got...)
	s.mu.Unlock()
	return pprofileotlp.NewExportResponse(), nil
}

// runAgent runs `spanprof agent` for app's pid, exporting to a sink,
// from before the workload's go until it ended and the agent's last
// report is in; it returns what the sink got and the app's stderr.
func runAgent(t *testing.T, bin string, app *exec.Cmd) ([]truth.Sample, string) {
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
	var agentLog strings.Builder
	var logMu sync.Mutex
	pipe, err := agent.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	agent.Stdout = io.Discard
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	started := make(chan struct{})
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(pipe)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			agentLog.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "agent started") {
				once.Do(func() { close(started) })
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(120 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("spanprof agent did not start within 120s:\n%s", agentLog.String())
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
	agent.Process.Signal(syscall.SIGINT)
	<-logDone
	if err := agent.Wait(); err != nil {
		t.Logf("spanprof agent: %v", err)
	}
	t.Logf("spanprof agent:\n%s", agentLog.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, appErr.String()
}
