// Package store runs `spanprof serve --store clickhouse://…` end to end:
// real serve processes, OTLP over gRPC from the OpenTelemetry SDK and the
// collector's profiles client, and a real clickhouse-server on loopback.
package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/web/live"
	"github.com/spanprof/spanprof/internal/web/live/chstore/chtest"
)

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func buildSpanprof(t *testing.T) string {
	root, _ := filepath.Abs("../..")
	bin := filepath.Join(t.TempDir(), "spanprof")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/spanprof")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	return bin
}

// serve is one `spanprof serve` process.
type serve struct {
	web, otlp string
	cmd       *exec.Cmd
}

func startServe(t *testing.T, bin string, otlpAddr string, args ...string) *serve {
	t.Helper()
	s := &serve{web: freePort(t), otlp: otlpAddr}
	a := append([]string{"serve", "--listen", s.web}, args...)
	if otlpAddr != "" {
		a = append(a, "--otlp-listen", otlpAddr)
	}
	s.cmd = exec.Command(bin, a...)
	out, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "spanprof:") {
		t.Fatalf("serve %v: no start line: %q %v", a, sc.Text(), sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return s
}

func (s *serve) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("decode %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// sendSpans exports spans of one service through the OpenTelemetry SDK
// to every address in addrs.
func sendSpans(t *testing.T, addrs []string, service string, fn func(tr trace.Tracer)) {
	t.Helper()
	ctx := context.Background()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service)))}
	for _, addr := range addrs {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, sdktrace.WithSyncer(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	fn(tp.Tracer("test"))
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("export spans to %v: %v", addrs, err)
	}
}

func sendProfile(t *testing.T, addr string, pd pprofile.Profiles) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = pprofileotlp.NewGRPCClient(conn).Export(context.Background(), pprofileotlp.NewExportRequestFromProfiles(pd))
	return err
}

// workload is one trace across two services: front (root and price)
// and stock (its server span, a child of the root), with a profile of
// each service's process.
type workload struct {
	t0      time.Time
	traceID string
	ids     map[string][8]byte
	root    trace.SpanContext
}

func (w *workload) frontSpans(tr trace.Tracer) {
	t0 := w.t0
	ctx, r := tr.Start(context.Background(), "GET /checkout", trace.WithTimestamp(t0), trace.WithSpanKind(trace.SpanKindServer))
	_, p := tr.Start(ctx, "price", trace.WithTimestamp(t0.Add(10*time.Millisecond)))
	p.End(trace.WithTimestamp(t0.Add(300 * time.Millisecond)))
	r.End(trace.WithTimestamp(t0.Add(600 * time.Millisecond)))
	w.root = r.SpanContext()
	w.traceID = w.root.TraceID().String()
	w.ids["GET /checkout"], w.ids["price"] = [8]byte(r.SpanContext().SpanID()), [8]byte(p.SpanContext().SpanID())
}

func (w *workload) stockSpans(tr trace.Tracer) {
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), w.root)
	_, s := tr.Start(ctx, "GET /stock", trace.WithTimestamp(w.t0.Add(310*time.Millisecond)), trace.WithSpanKind(trace.SpanKindServer))
	s.End(trace.WithTimestamp(w.t0.Add(590 * time.Millisecond)))
	w.ids["GET /stock"] = [8]byte(s.SpanContext().SpanID())
}

// profiles are each service's profile of the trace: on-CPU ticks inside
// and outside their spans and a wait.
func (w *workload) profiles() (front, stock *profile.Profile) {
	t0 := w.t0
	tid := [16]byte(w.root.TraceID())
	link := func(name string) profile.Link { return profile.Link{TraceID: tid, SpanID: w.ids[name]} }
	loop := []profile.Frame{{Function: "loop", Address: 0x1000}, {Function: "main", Address: 0x2000}}
	wait := []profile.Frame{{Function: "futex_wait", Address: 0xffff1000}, {Function: "main", Address: 0x2000}}
	front = &profile.Profile{Start: t0, End: t0.Add(time.Second), Frequency: 100,
		Processes: map[uint32]*profile.Process{42: {PID: 42, ExeName: "front", ServiceName: "front"}}}
	for i := range 33 {
		front.Samples = append(front.Samples, profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 43, ThreadName: "w", Frames: loop,
			Value: 1, Link: link("price"), Time: t0.Add(time.Duration(20+i*9) * time.Millisecond)})
	}
	front.Samples = append(front.Samples, profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 43, ThreadName: "w", Frames: wait,
		Value: 250e6, State: "S", Reason: "futex_wait_queue", Link: link("GET /checkout"), Time: t0.Add(595 * time.Millisecond)})
	stock = &profile.Profile{Start: t0, End: t0.Add(time.Second), Frequency: 200,
		Processes: map[uint32]*profile.Process{7: {PID: 7, ExeName: "stock", ServiceName: "stock"}}}
	for i := range 50 {
		stock.Samples = append(stock.Samples, profile.Sample{Kind: profile.OnCPU, PID: 7, TID: 8, ThreadName: "s", Frames: loop,
			Value: 1, Link: link("GET /stock"), Time: t0.Add(time.Duration(315+i*5) * time.Millisecond)})
	}
	return front, stock
}

// waitSame polls web's trace until it matches want's JSON (its window
// line aside).
func waitSame(t *testing.T, web, traceID string, want live.TraceView) {
	t.Helper()
	want.Window = live.Stats{}
	wj, _ := json.MarshalIndent(want, "", " ")
	var gj []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var got live.TraceView
		if getJSON(t, "http://"+web+"/api/trace/"+traceID, &got) != http.StatusOK {
			continue
		}
		got.Window = live.Stats{}
		gj, _ = json.MarshalIndent(got, "", " ")
		if string(gj) == string(wj) {
			return
		}
	}
	t.Fatalf("trace %s on %s differs from the in-memory window's:\nwant %s\ngot %s", traceID, web, wj, gj)
}

func window(t *testing.T, web string) live.Stats {
	t.Helper()
	var st live.Stats
	if code := getJSON(t, "http://"+web+"/api/window", &st); code != http.StatusOK {
		t.Fatalf("GET /api/window on %s: status %d", web, code)
	}
	return st
}

// TestScaleOut: two serve instances ingest into one ClickHouse (one
// service's spans and profile through each, and a retried profile
// export through both), a third that only queries shows the one trace
// exactly as an in-memory serve given the same exports once; after
// every instance restarts the trace is still there. Then ClickHouse goes
// down under an ingesting instance and comes back, and a bad export is
// refused with a clear error.
func TestScaleOut(t *testing.T) {
	srv := chtest.Start(t)
	bin := buildSpanprof(t)
	url := srv.URL("fleet")
	a := startServe(t, bin, freePort(t), "--store", url)
	b := startServe(t, bin, freePort(t), "--store", url)
	q := startServe(t, bin, "", "--store", url)
	mem := startServe(t, bin, freePort(t))

	w := &workload{t0: time.Now().Add(-2 * time.Minute).Truncate(time.Millisecond), ids: map[string][8]byte{}}
	sendSpans(t, []string{a.otlp, mem.otlp}, "front", w.frontSpans)
	sendSpans(t, []string{b.otlp, mem.otlp}, "stock", w.stockSpans)
	front, stock := w.profiles()
	for _, e := range []struct {
		addr string
		p    *profile.Profile
	}{{a.otlp, front}, {b.otlp, stock}, {mem.otlp, front}, {mem.otlp, stock},
		// Retries: the front export again through both instances.
		{b.otlp, front}, {a.otlp, front}} {
		if err := sendProfile(t, e.addr, otlp.Build(e.p)); err != nil {
			t.Fatalf("export profile to %s: %v", e.addr, err)
		}
	}
	var want live.TraceView
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		want = live.TraceView{}
		if getJSON(t, "http://"+mem.web+"/api/trace/"+w.traceID, &want) == http.StatusOK && len(want.Spans) == 3 && want.Spans[0].Samples > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-memory serve: trace %+v", want)
		}
	}
	waitSame(t, q.web, w.traceID, want)
	waitSame(t, a.web, w.traceID, want)
	byName := map[string]live.SpanView{}
	for _, s := range want.Spans {
		byName[s.Name] = s
	}
	if p := byName["price"]; p.OnCPUNs != 320e6 || p.OutsideSamples != 1 {
		t.Errorf("price: on-CPU %d ns, %d samples outside, want 320 ms and 1 (33 ticks at 100 Hz, the last after its end)", p.OnCPUNs, p.OutsideSamples)
	}
	if s := byName["GET /stock"]; s.OnCPUNs != 250e6 || s.Service != "stock" {
		t.Errorf("GET /stock: on-CPU %d ns, service %q, want 250 ms (50 ticks at 200 Hz) of stock", s.OnCPUNs, s.Service)
	}
	if st := window(t, b.web).Store; st == nil || st.Status != "ok" {
		t.Errorf("instance b store status: %+v", st)
	}
	var list []live.TraceSummary
	getJSON(t, "http://"+q.web+"/api/traces", &list)
	var wantList []live.TraceSummary
	getJSON(t, "http://"+mem.web+"/api/traces", &wantList)
	if lj, wj := fmt.Sprint(list), fmt.Sprint(wantList); lj != wj {
		t.Errorf("trace list on the query-only instance %s, in memory %s", lj, wj)
	}

	// The flame graph page of the whole store (the live entry) reads the
	// samples and their stacks back from ClickHouse.
	resp, err := http.Get("http://" + q.web + "/profile.json?file=live")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"futex_wait"`) || !strings.Contains(string(body), `"stock"`) {
		t.Errorf("flame graph data of the store: status %d, %d bytes without the replayed frames and processes", resp.StatusCode, len(body))
	}

	// Restart every store instance: the trace stays.
	for _, s := range []*serve{a, b, q} {
		s.stop()
	}
	q2 := startServe(t, bin, "", "--store", url)
	waitSame(t, q2.web, w.traceID, want)

	// ClickHouse down under an ingesting instance: the export is
	// accepted and buffered, the status says so, and it lands once the
	// server is back, without a restart.
	a2 := startServe(t, bin, freePort(t), "--store", url)
	srv.Down()
	w2 := &workload{t0: time.Now().Add(-time.Minute).Truncate(time.Millisecond), ids: map[string][8]byte{}}
	sendSpans(t, []string{a2.otlp, mem.otlp}, "front", w2.frontSpans)
	sendSpans(t, []string{a2.otlp, mem.otlp}, "stock", w2.stockSpans)
	f2, s2 := w2.profiles()
	for _, addr := range []string{a2.otlp, mem.otlp} {
		for _, p := range []*profile.Profile{f2, s2} {
			if err := sendProfile(t, addr, otlp.Build(p)); err != nil {
				t.Fatalf("export profile to %s with ClickHouse down: %v", addr, err)
			}
		}
	}
	var st live.Stats
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st = window(t, a2.web)
		// Three span exports (the SDK's syncer exports each span as it
		// ends) and two profiles.
		if st.Store != nil && st.Store.Status == "failing" && st.Store.BufferedBatches == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse down: /api/window store %+v, want failing with 5 exports buffered", st.Store)
		}
	}
	if !strings.Contains(st.Store.Error, "reach clickhouse") {
		t.Errorf("store error %q does not say ClickHouse is unreachable", st.Store.Error)
	}
	if code := getJSON(t, "http://"+q2.web+"/api/trace/"+w.traceID, nil); code != http.StatusServiceUnavailable {
		t.Errorf("trace with ClickHouse down: status %d, want 503", code)
	}
	srv.Up()
	var want2 live.TraceView
	getJSON(t, "http://"+mem.web+"/api/trace/"+w2.traceID, &want2)
	waitSame(t, q2.web, w2.traceID, want2)
	if st := window(t, a2.web).Store; st.Status != "ok" || st.DroppedSamples != 0 || st.BufferedBatches != 0 {
		t.Errorf("after recovery: %+v", st)
	}

	// A profile export that does not decode is refused, as with the
	// in-memory window, and counted.
	bad := pprofile.NewProfiles()
	rp := bad.ResourceProfiles().AppendEmpty()
	pr := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	pr.Samples().AppendEmpty().SetStackIndex(99)
	err = sendProfile(t, a2.otlp, bad)
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad export: %v, want InvalidArgument", err)
	} else {
		t.Logf("bad export refused: %v", err)
	}
	if st := window(t, a2.web); st.Rejected != 1 {
		t.Errorf("rejected %d exports, want 1", st.Rejected)
	}
}
