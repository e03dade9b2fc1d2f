package trace

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore/chtest"
)

// The two-service example (make demo-trace): goservice (OpenTelemetry Go
// SDK and sdk/go) calls chttp (sdk/c) over HTTP on loopback with a W3C
// traceparent header; both services export their spans to a real
// OpenTelemetry Collector (test/collector), goservice over OTLP/gRPC with
// the Go SDK, chttp over OTLP/HTTP JSON with its own small exporter, and
// the agent exports its profiles there too; the collector forwards traces
// and profiles to `spanprof serve --otlp-listen`.
const forwardConfig = `receivers:
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
      exporters: [otlp]
`

// fanoutConfig forwards everything to two receivers: the in-memory serve
// and one writing into ClickHouse, so both get the very same exports.
const fanoutConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
exporters:
  otlp/mem:
    endpoint: %s
    tls:
      insecure: true
  otlp/store:
    endpoint: %s
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/mem, otlp/store]
    profiles:
      receivers: [otlp]
      exporters: [otlp/mem, otlp/store]
`

func collectorBin(t *testing.T, root, dir string) string {
	if p := os.Getenv("SPANPROF_TESTCOL"); p != "" {
		return p
	}
	bin := filepath.Join(dir, "spanprof-testcol")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join(root, "test", "collector")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build test collector: %v\n%s", err, out)
	}
	return bin
}

func TestTwoServicesThroughCollector(t *testing.T) { twoServices(t, "") }

// TestTwoServicesClickHouse is the same example with the collector
// forwarding to the in-memory serve and to `serve --store
// clickhouse://…` on a real clickhouse-server: a third serve that only
// reads ClickHouse shows every trace with the in-memory window's
// per-span figures, and still does after it restarts.
func TestTwoServicesClickHouse(t *testing.T) {
	if _, err := chtest.Binary(); err != nil {
		t.Skip("skip: " + err.Error())
	}
	twoServices(t, "clickhouse")
}

func twoServices(t *testing.T, store string) {
	testutil.RequireRoot(t, "skip: profiling needs root")
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skip: no BTF at /sys/kernel/btf/vmlinux")
	}
	dir := t.TempDir()
	root, _ := filepath.Abs("../..")
	spanprof, gosvc, _ := build(t, dir)
	logSteal(t)
	chttp := filepath.Join(dir, "chttp")
	if out, err := exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-Wl,--build-id=sha1", "-rdynamic",
		"-I", filepath.Join(root, "sdk/c"), "-o", chttp, filepath.Join(root, "testdata/tracework/chttp/chttp.c")).CombinedOutput(); err != nil {
		t.Fatalf("build chttp: %v\n%s", err, out)
	}
	col := collectorBin(t, root, dir)
	serveOTLP, webAddr, colAddr, colHTTP := freePort(t), freePort(t), freePort(t), freePort(t)
	srv := start(t, spanprof, "serve", "--listen", webAddr, "--otlp-listen", serveOTLP)
	srv.line(t, "spanprof:")
	config := fmt.Sprintf(forwardConfig, colAddr, colHTTP, serveOTLP)
	var storeURL, queryWeb string
	if store != "" {
		ch := chtest.Start(t)
		storeURL = ch.URL("demo")
		storeOTLP := freePort(t)
		start(t, spanprof, "serve", "--listen", freePort(t), "--otlp-listen", storeOTLP, "--store", storeURL).line(t, "spanprof:")
		queryWeb = freePort(t)
		start(t, spanprof, "serve", "--listen", queryWeb, "--store", storeURL).line(t, "spanprof:")
		config = fmt.Sprintf(fanoutConfig, colAddr, colHTTP, serveOTLP, storeOTLP)
	}
	cfg := filepath.Join(dir, "collector.yaml")
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
	c := startEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + colHTTP}, chttp)
	cf := c.line(t, "ready")
	g := start(t, gosvc, "-endpoint", colAddr, "-c-url", "http://127.0.0.1:"+cf[2])
	gpid := g.line(t, "ready")[1]
	metricsAddr := freePort(t)
	start(t, spanprof, "agent", "--endpoint", colAddr, "--insecure", "--pid", gpid, "--pid", cf[1],
		"--off-cpu", "--frequency", onCPUHz, "--go-wait-frequency", "199", "--report-interval", "1s", "--metrics-listen", metricsAddr)
	defer logLosses(t, metricsAddr)

	req := func(goCPU, goSleep, cCPU, cSleep int) (string, map[string]truth) {
		fmt.Fprintf(g.in, "req %d %d %d %d\n", goCPU, goSleep, cCPU, cSleep)
		spans := map[string]truth{}
		for {
			f := g.line2(t)
			switch f[0] {
			case "truth":
				spans[f[1]] = parseTruth(f[2], f[3:])
			case "done":
				return f[1], spans
			}
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for warm := 0; ; warm++ {
		if time.Now().After(deadline) {
			t.Fatal("no samples of both services reached serve through the collector within 90s")
		}
		tr, _ := req(100, 20, 100, 20)
		time.Sleep(1500 * time.Millisecond)
		if tv, ok := getTrace(t, webAddr, tr); ok && sampled(tv, "go cpu") && sampled(tv, "GET /work") {
			t.Logf("agent ready after %d warm-up requests", warm+1)
			break
		}
	}
	want := map[string]map[string]truth{}
	var first string
	for _, w := range []struct{ goCPU, goSleep, cCPU, cSleep int }{{300, 250, 250, 200}, {150, 400, 400, 100}, {60, 100, 60, 60}} {
		tr, spans := req(w.goCPU, w.goSleep, w.cCPU, w.cSleep)
		want[tr] = spans
		if first == "" {
			first = tr
		}
	}
	settle(t, webAddr, want)
	// Per trace: go cpu on, go sleep off, the call's wait, c work on and off.
	checkKnownWork(t, webAddr, want, 15)
	for tr := range want {
		tv, _ := getTrace(t, webAddr, tr)
		names := map[string]string{}
		for _, s := range tv.Spans {
			names[s.Name] = s.Service
		}
		for name, svc := range map[string]string{"handle request": "go-service", "go cpu": "go-service", "go sleep": "go-service",
			"call c-service": "go-service", "GET /work": "c-service"} {
			if names[name] != svc {
				t.Errorf("trace %s: span %q of service %q, want %q (spans %v)", tr, name, names[name], svc, names)
			}
		}
	}
	if store != "" {
		// The query-only instance answers from ClickHouse what the
		// in-memory window answers, and again once restarted.
		// (The known work was checked on the in-memory serve above; the
		// same JSON carries the same figures.)
		sameTraces(t, webAddr, queryWeb, want)
		again := freePort(t)
		start(t, spanprof, "serve", "--listen", again, "--store", storeURL).line(t, "spanprof:")
		sameTraces(t, webAddr, again, want)
		webAddr = queryWeb
	}
	if shot := os.Getenv("SPANPROF_TRACE_SCREENSHOT"); shot != "" {
		screenshotTrace(t, webAddr, first, shot)
	}
}

// sameTraces checks that got answers every trace of want with mem's
// JSON (the window line aside), waiting up to 30 s for its writes.
func sameTraces(t *testing.T, mem, got string, want map[string]map[string]truth) {
	t.Helper()
	for tr := range want {
		a, _ := getTrace(t, mem, tr)
		a.Window = live.Stats{}
		ja, _ := json.MarshalIndent(a, "", " ")
		var jb []byte
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			b, _ := getTrace(t, got, tr)
			b.Window = live.Stats{}
			jb, _ = json.MarshalIndent(b, "", " ")
			if string(ja) == string(jb) || time.Now().After(deadline) {
				break
			}
		}
		if string(ja) != string(jb) {
			t.Errorf("trace %s from ClickHouse differs from the in-memory window's:\nmemory %s\nclickhouse %s", tr, ja, jb)
		} else {
			t.Logf("trace %s: %d spans, the same from ClickHouse as in memory", tr, len(a.Spans))
		}
	}
}

// screenshotTrace saves the trace view as a person would see it.
func screenshotTrace(t *testing.T, webAddr, trace, path string) {
	abs, _ := filepath.Abs(path)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(),
		"--window-size=1400,1000", "--virtual-time-budget=5000", "--screenshot="+abs, "http://"+webAddr+"/trace/"+trace)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("screenshot with chromium: %v\n%s", err, out)
		return
	}
	t.Logf("trace view screenshot: %s", abs)
}

// logLosses logs the agent's non-zero counters of lost, dropped, cut or
// uncovered data: what to read first when a span's figure is off.
func logLosses(t *testing.T, addr string) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Logf("agent metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || strings.HasSuffix(l, " 0") {
			continue
		}
		for _, w := range []string{"lost", "drop", "uncovered", "fail", "error", "late", "cut", "miss", "go_wait"} {
			if strings.Contains(l, w) {
				t.Logf("agent: %s", l)
				break
			}
		}
	}
}
