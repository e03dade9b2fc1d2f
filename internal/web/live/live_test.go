package live

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/spanprof/spanprof/internal/export/otlp"
	"github.com/spanprof/spanprof/internal/profile"
)

// startLive runs a receiver and the HTTP handler over store.
func startLive(t *testing.T, store *Store) (otlpAddr string, web *httptest.Server) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewReceiver(store, log).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("receiver: %v", err)
		}
	})
	next := http.NotFoundHandler()
	web = httptest.NewServer(NewHandler(store, next, log))
	t.Cleanup(web.Close)
	return ln.Addr().String(), web
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

// TestTraceView sends spans through the real OpenTelemetry SDK and its
// OTLP/gRPC exporter, and a profile through the collector's profiles
// client, then checks what the trace API makes of them against the
// samples that were sent.
func TestTraceView(t *testing.T) {
	store := NewStore(Limits{})
	addr, web := startLive(t, store)
	ctx := context.Background()

	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("checkout"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("test")
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	rctx, root := tr.Start(ctx, "GET /checkout", trace.WithTimestamp(t0))
	_, work := tr.Start(rctx, "price", trace.WithTimestamp(t0.Add(10*time.Millisecond)))
	work.End(trace.WithTimestamp(t0.Add(510 * time.Millisecond)))
	_, idle := tr.Start(rctx, "cache lookup", trace.WithTimestamp(t0.Add(520*time.Millisecond)))
	idle.End(trace.WithTimestamp(t0.Add(530 * time.Millisecond)))
	root.End(trace.WithTimestamp(t0.Add(600 * time.Millisecond)))
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatalf("export spans: %v", err)
	}

	// 30 ticks at 100 Hz (300 ms on-CPU) and 150 ms blocked in work; 5
	// ticks of a span no export carries.
	traceID := [16]byte(root.SpanContext().TraceID())
	workID := [8]byte(work.SpanContext().SpanID())
	ghost := [8]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4}
	proc := &profile.Process{PID: 42, ExeName: "pricer", ServiceName: "checkout"}
	fn := func(name string) []profile.Frame {
		return []profile.Frame{{Function: name, Address: 0x1000}, {Function: "main", Address: 0x2000}}
	}
	p := &profile.Profile{Start: t0, End: t0.Add(time.Second), Frequency: 100, Processes: map[uint32]*profile.Process{42: proc}}
	for i := range 30 {
		p.Samples = append(p.Samples, profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 43, Frames: fn("loop"), Value: 1,
			Link: profile.Link{TraceID: traceID, SpanID: workID}, Time: t0.Add(time.Duration(20+i*10) * time.Millisecond)})
	}
	for i, w := range []struct {
		ns     int64
		reason string
	}{{100e6, "futex_wait_queue"}, {50e6, "do_nanosleep"}} {
		p.Samples = append(p.Samples, profile.Sample{Kind: profile.OffCPU, PID: 42, TID: 43, Frames: fn("wait"), Value: w.ns,
			State: "S", Reason: w.reason, Link: profile.Link{TraceID: traceID, SpanID: workID}, Time: t0.Add(time.Duration(400+i*60) * time.Millisecond)})
	}
	for i := range 5 {
		p.Samples = append(p.Samples, profile.Sample{Kind: profile.OnCPU, PID: 42, TID: 44, Frames: fn("other"), Value: 1,
			Link: profile.Link{TraceID: traceID, SpanID: ghost}, Time: t0.Add(time.Duration(100+i*10) * time.Millisecond)})
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := pprofileotlp.NewGRPCClient(conn).Export(ctx, pprofileotlp.NewExportRequestFromProfiles(otlp.Build(p))); err != nil {
		t.Fatalf("export profile: %v", err)
	}

	var tv TraceView
	if code := getJSON(t, web.URL+"/api/trace/"+root.SpanContext().TraceID().String(), &tv); code != http.StatusOK {
		t.Fatalf("GET trace: status %d", code)
	}
	byName := map[string]SpanView{}
	for _, s := range tv.Spans {
		byName[s.Name] = s
	}
	if len(tv.Spans) != 4 || tv.Spans[0].Name != "GET /checkout" || tv.Spans[0].Depth != 0 {
		t.Fatalf("spans = %+v, want the root first and 4 spans", tv.Spans)
	}
	w := byName["price"]
	if !w.Exported || w.Service != "checkout" || w.WallNs != 500e6 || w.Depth != 1 || w.ParentSpanID != root.SpanContext().SpanID().String() {
		t.Errorf("price span = %+v", w)
	}
	if w.OnCPUNs != 300e6 || w.OnCPUSamples != 30 || w.OffCPUNs != 150e6 {
		t.Errorf("price on=%d (%d samples) off=%d, want 300ms (30) and 150ms", w.OnCPUNs, w.OnCPUSamples, w.OffCPUNs)
	}
	if w.OffCPUByReason["futex_wait_queue"] != 100e6 || w.OffCPUByReason["do_nanosleep"] != 50e6 || w.OffCPUByState["S"] != 150e6 {
		t.Errorf("price off-CPU by reason %v, by state %v", w.OffCPUByReason, w.OffCPUByState)
	}
	if w.OnCPUShare != 0.6 || w.OffCPUShare != 0.3 {
		t.Errorf("price shares on %.3f off %.3f, want 0.6 and 0.3", w.OnCPUShare, w.OffCPUShare)
	}
	if c := byName["cache lookup"]; !c.Exported || c.Samples != 0 || tv.NoSamples != 2 {
		t.Errorf("cache lookup = %+v, spans without samples %d (want the root and it)", c, tv.NoSamples)
	}
	g := byName[""]
	if g.Exported || g.SpanID != "deadbeef01020304" || g.OnCPUSamples != 5 || tv.Unexported != 1 || g.Service != "checkout" {
		t.Errorf("span only in samples = %+v (unexported %d)", g, tv.Unexported)
	}

	var flame FlameNode
	getJSON(t, web.URL+"/api/trace/"+tv.TraceID+"/flame?span_id="+w.SpanID+"&kind=off", &flame)
	if flame.Value != 150e6 || len(flame.Children) != 1 || flame.Children[0].Name != "pricer 42" ||
		flame.Children[0].Children[0].Name != "main" || flame.Children[0].Children[0].Children[0].Name != "wait" {
		t.Errorf("off-CPU flame = %+v", flame)
	}
	var list []TraceSummary
	getJSON(t, web.URL+"/api/traces", &list)
	if len(list) != 1 || list[0].Root != "GET /checkout" || list[0].Spans != 3 || list[0].SampledSpans != 2 || list[0].OnCPUNs != 350e6 {
		t.Errorf("traces = %+v", list)
	}
	if code := getJSON(t, web.URL+"/api/trace/00000000000000000000000000000001", nil); code != http.StatusNotFound {
		t.Errorf("unknown trace: status %d, want 404", code)
	}
	if code := getJSON(t, web.URL+"/api/trace/xyz", nil); code != http.StatusBadRequest {
		t.Errorf("bad trace id: status %d, want 400", code)
	}
	resp, err := http.Get(web.URL + "/trace/" + tv.TraceID)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("trace page: %v %v", err, resp)
	}
}

// TestEviction checks both limits evict the oldest data and count it.
func TestEviction(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewStore(Limits{MaxSamples: 10, MaxSpans: 3, MaxAge: time.Minute})
	s.now = func() time.Time { return now }
	batch := func(n int) *profile.Profile {
		p := &profile.Profile{Frequency: 100}
		for range n {
			p.Samples = append(p.Samples, profile.Sample{Value: 1})
		}
		return p
	}
	s.AddProfile(batch(6))
	s.AddProfile(batch(6)) // 12 > 10: the first goes
	if st := s.Stats(); st.Samples != 6 || st.EvictedSamplesSize != 6 || st.Batches != 1 {
		t.Errorf("after size eviction: %+v", st)
	}
	for i := range 5 {
		s.AddSpans([]Span{{TraceID: [16]byte{1}, SpanID: [8]byte{byte(i + 1)}}})
	}
	s.AddSpans([]Span{{TraceID: [16]byte{1}, SpanID: [8]byte{5}, Name: "again"}}) // a retry replaces
	if st := s.Stats(); st.Spans != 3 || st.EvictedSpansSize != 2 {
		t.Errorf("after span eviction: %+v", st)
	}
	if tv, _ := s.Trace([16]byte{1}); len(tv.Spans) != 3 || tv.Spans[2].Name != "again" {
		t.Errorf("spans kept: %+v", tv.Spans)
	}
	v := s.Stats().Version
	s.Evict()
	if s.Stats().Version != v {
		t.Error("an eviction that removed nothing changed the version")
	}
	now = now.Add(2 * time.Minute)
	s.Evict()
	if st := s.Stats(); st.Samples != 0 || st.Spans != 0 || st.EvictedSamplesAge != 6 || st.EvictedSpansAge != 3 || st.Version == v {
		t.Errorf("after age eviction: %+v", st)
	}
	if p, _ := s.Profile(); len(p.Samples) != 0 {
		t.Errorf("window profile keeps %d samples", len(p.Samples))
	}
}

func TestCheckLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{{"127.0.0.1:4317", true}, {"[::1]:4317", true}, {"localhost:4317", true}, {"0.0.0.0:4317", false}, {":4317", false}, {"10.1.2.3:4317", false}} {
		err := CheckLoopback(tc.addr)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrNotLoopback)) {
			t.Errorf("CheckLoopback(%q) = %v", tc.addr, err)
		}
	}
}
