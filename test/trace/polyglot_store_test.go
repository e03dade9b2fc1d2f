package trace

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore/chtest"
)

// polyglotStoreConfig is polyglotConfig with the collector forwarding
// traces and profiles both to the in-memory serve and to a serve writing
// into ClickHouse, so both get the very same exports.
const polyglotStoreConfig = `receivers:
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
  profilefile:
    path: %s
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
      exporters: [otlp/mem, otlp/store, profilefile]
`

// TestThreeServicesClickHouse is the polyglot example (Go, Java under
// the OpenTelemetry Java agent, Python under opentelemetry-instrument)
// with the collector forwarding to the in-memory serve and to `serve
// --store clickhouse://…` on a real clickhouse-server: the known work is
// checked on the in-memory window as in TestThreeServicesPolyglot, and a
// serve that only reads ClickHouse must show every trace with the same
// JSON, per-span figures included; so must a new one once both store
// instances have stopped.
func TestThreeServicesClickHouse(t *testing.T) {
	if _, err := chtest.Binary(); err != nil {
		t.Skip("skip: " + err.Error())
	}
	polyglot(t, "clickhouse")
}

// storeServes are the ClickHouse side of a test: a clickhouse-server,
// one serve ingesting into it and one that only reads it.
type storeServes struct {
	ch             *chtest.Server
	bin, url       string
	otlp, web      string // the ingesting instance's
	query          string // the query-only instance's web address
	ingest, reader *proc
}

func startStores(t *testing.T, bin string) *storeServes {
	t.Helper()
	ch := chtest.Start(t)
	s := &storeServes{ch: ch, bin: bin, url: ch.URL("polyglot"), otlp: freePort(t), web: freePort(t), query: freePort(t)}
	s.ingest = start(t, bin, "serve", "--listen", s.web, "--otlp-listen", s.otlp, "--store", s.url)
	s.ingest.line(t, "spanprof:")
	s.reader = start(t, bin, "serve", "--listen", s.query, "--store", s.url)
	s.reader.line(t, "spanprof:")
	return s
}

// check compares every trace of want on the query-only instance with the
// in-memory serve mem, then stops both store instances, starts a new
// reader on the same address, and compares again. It returns that
// reader's address.
func (s *storeServes) check(t *testing.T, mem string, want map[string]map[string]truth) string {
	t.Helper()
	sameTraces(t, mem, s.query, want)
	// The ingesting instance wrote everything it took and dropped nothing.
	var st live.Stats
	if code := getJSONTrace(t, "http://"+s.web+"/api/window", &st); code != http.StatusOK || st.Store == nil {
		t.Fatalf("GET /api/window of the ingesting instance: status %d, store %+v", code, st.Store)
	}
	if ss := st.Store; ss.Status != "ok" || ss.DroppedSamples != 0 || ss.DroppedSpans != 0 || ss.WrittenSamples == 0 {
		t.Errorf("ingesting instance's store: %+v, want ok, samples written and nothing dropped", *ss)
	} else {
		t.Logf("ingesting instance: %d samples, %d spans, %d stacks written into ClickHouse, %d exports buffered",
			ss.WrittenSamples, ss.WrittenSpans, ss.WrittenStacks, ss.BufferedBatches)
	}
	s.ingest.stop()
	s.reader.stop()
	start(t, s.bin, "serve", "--listen", s.query, "--store", s.url).line(t, "spanprof:")
	sameTraces(t, mem, s.query, want)
	return s.query
}

// getJSONTrace decodes url's JSON answer into v and returns the status.
func getJSONTrace(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("decode %s: %v", url, err)
		}
	}
	return resp.StatusCode
}

// stop interrupts the process and waits for it to exit (killing it
// after 10 s), as a restart does.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
