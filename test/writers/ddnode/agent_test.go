package ddnode

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/test/truth"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestAgentNode: `spanprof agent --pid` attached to a running Node 24
// under dd-trace (its addon already loaded) sends linked samples to an
// OTLP sink; the walk's error counter is on /metrics.
func TestAgentNode(t *testing.T) {
	testutil.RequireRoot(t)
	truthPath := filepath.Join(t.TempDir(), "spans.jsonl")
	node, args, env := workloadCmd(t, truthPath, 20, 60)
	bin := buildSpanprof(t)
	root := testutil.RepoRoot()
	sinkBin := filepath.Join(t.TempDir(), "sink")
	if out, err := exec.Command("go", "build", "-o", sinkBin, filepath.Join(root, "test", "kernels", "sink")).CombinedOutput(); err != nil {
		t.Fatalf("build sink: %v\n%s", err, out)
	}
	exports := t.TempDir()
	sinkAddr := freePort(t)
	sink := exec.Command(sinkBin, "--listen", sinkAddr, "--dir", exports)
	sink.Stdout, sink.Stderr = os.Stderr, os.Stderr
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Process.Kill(); _ = sink.Wait() })

	app := exec.Command(node, args...)
	app.Env = append(env, "SPANWORK_WAIT=1")
	app.Stderr = os.Stderr
	stdin, _ := app.StdinPipe()
	stdout, _ := app.StdoutPipe()
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Process.Kill(); _ = app.Wait() })
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("workload did not get ready: %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	metrics := freePort(t)
	agent := exec.Command(bin, "agent", "--endpoint", sinkAddr, "--insecure", "--pid", fmt.Sprint(app.Process.Pid),
		"--frequency", "499", "--report-interval", "1s", "--metrics-listen", metrics)
	var alog strings.Builder
	agent.Stdout, agent.Stderr = &alog, &alog
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = agent.Process.Kill(); _ = agent.Wait() })
	// Ready: /healthz answers once the programs are loaded.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := http.Get("http://" + metrics + "/healthz")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not healthy within 60s:\n%s", alog.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // the first scan of the pid
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := app.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	time.Sleep(2500 * time.Millisecond) // the last report interval
	var walkErrs string
	if r, err := http.Get("http://" + metrics + "/metrics"); err == nil {
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "node_context_walk_error") && !strings.HasPrefix(l, "#") {
				walkErrs = l
			}
		}
	}
	_ = agent.Process.Signal(syscall.SIGTERM)
	_ = agent.Wait()
	t.Logf("agent log (tail):\n%s", tail(alog.String(), 15))
	if walkErrs == "" {
		t.Errorf("/metrics has no node_context_walk_error series")
	}
	t.Logf("metrics: %s", walkErrs)

	files, _ := filepath.Glob(filepath.Join(exports, "*.otlp.json"))
	var samples []truth.Sample
	for _, f := range files {
		s, err := truth.ReadOTLP(f)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s...)
	}
	t.Logf("%d export requests, %d samples", len(files), len(samples))
	spans := readTruth(t, truthPath)
	if len(spans) != 20 {
		t.Fatalf("workload wrote %d spans, want 20", len(spans))
	}
	judge(t, samples, app.Process.Pid, spans)
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
