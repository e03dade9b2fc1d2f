package browser

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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
	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/web/live"
)

const liveTraces = 1000

// startServe runs the real `spanprof serve --otlp-listen` and returns its
// OTLP and web addresses.
func startServe(t *testing.T) (otlpAddr, webAddr string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "spanprof")
	build := exec.Command("go", "build", "-o", bin, "./cmd/spanprof")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build spanprof: %v\n%s", err, out)
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	otlpAddr, webAddr = free(), free()
	cmd := exec.Command(bin, "serve", "--listen", webAddr, "--otlp-listen", otlpAddr)
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "spanprof:") {
		t.Fatalf("serve did not start: %q %v", sc.Text(), sc.Err())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return otlpAddr, webAddr
}

// fillWindow exports liveTraces traces through the OpenTelemetry SDK and
// profile samples linked to their spans through the OTLP profiles client:
// trace i has a root, "db query" with (i%5+1)×10 ms off-CPU and "render"
// with i%7+1 on-CPU ticks at 100 Hz, in four services.
func fillWindow(t *testing.T, otlpAddr string) {
	ctx := context.Background()
	services := []string{"checkout", "pricing", "cart", "search"}
	var tps []*sdktrace.TracerProvider
	for _, s := range services {
		// One exporter each: shutting a provider down shuts its exporter.
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlpAddr), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		tps = append(tps, sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxExportBatchSize(512)),
			sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(s)))))
	}
	conn, err := grpc.NewClient(otlpAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pprofileotlp.NewGRPCClient(conn)
	frames := func(fs ...string) []profile.Frame {
		out := make([]profile.Frame, len(fs))
		for i, f := range fs {
			out[i] = profile.Frame{Function: f, Address: uint64(0x1000 * (i + 1))}
		}
		return out
	}
	t0 := time.Now().Add(-10 * time.Minute).Truncate(time.Millisecond)
	var p *profile.Profile
	flush := func() {
		if _, err := client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(otlp.Build(p))); err != nil {
			t.Fatalf("export profile: %v", err)
		}
		p = nil
	}
	for i := range liveTraces {
		if p == nil {
			p = &profile.Profile{Start: t0, End: t0.Add(time.Hour), Frequency: 100, Processes: map[uint32]*profile.Process{}}
			for j, s := range services {
				pid := uint32(100 + j)
				p.Processes[pid] = &profile.Process{PID: pid, ExeName: s + "d", ServiceName: s}
			}
		}
		svc := i % len(services)
		pid := uint32(100 + svc)
		tr := tps[svc].Tracer("browser-test")
		start := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		rctx, root := tr.Start(ctx, fmt.Sprintf("GET /item/%d", i), trace.WithTimestamp(start))
		_, db := tr.Start(rctx, "db query", trace.WithTimestamp(start.Add(time.Millisecond)))
		db.End(trace.WithTimestamp(start.Add(100 * time.Millisecond)))
		_, render := tr.Start(rctx, "render", trace.WithTimestamp(start.Add(110*time.Millisecond)))
		render.End(trace.WithTimestamp(start.Add(200 * time.Millisecond)))
		root.End(trace.WithTimestamp(start.Add(210 * time.Millisecond)))
		tid := [16]byte(root.SpanContext().TraceID())
		p.Samples = append(p.Samples, profile.Sample{Kind: profile.OffCPU, PID: pid, TID: pid, Value: int64(i%5+1) * 10e6,
			State: "S", Reason: "futex_wait_queue", Frames: frames("futex_wait", "query", "main"),
			Link: profile.Link{TraceID: tid, SpanID: [8]byte(db.SpanContext().SpanID())}, Time: start.Add(50 * time.Millisecond)})
		for k := range i%7 + 1 {
			leaf := []string{"layout", "paint", "encode"}[k%3]
			p.Samples = append(p.Samples, profile.Sample{Kind: profile.OnCPU, PID: pid, TID: pid, Value: 1,
				Frames: frames(leaf, "render", "main"), Link: profile.Link{TraceID: tid, SpanID: [8]byte(render.SpanContext().SpanID())},
				Time: start.Add(time.Duration(120+k*10) * time.Millisecond)})
		}
		if i%100 == 99 {
			flush()
		}
	}
	for _, tp := range tps {
		if err := tp.Shutdown(ctx); err != nil {
			t.Fatalf("export spans: %v", err)
		}
	}
}

func apiGet(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("decode %s: %v", url, err)
	}
}

// msText parses the page's "1,234.5 ms" (with an optional share after).
func msText(t *testing.T, s string) float64 {
	t.Helper()
	if s == "" {
		return 0
	}
	f, _, _ := strings.Cut(strings.ReplaceAll(s, ",", ""), " ms")
	var v float64
	if _, err := fmt.Sscan(f, &v); err != nil {
		t.Fatalf("parse %q as milliseconds: %v", s, err)
	}
	return v
}

func closeMs(got float64, wantNs int64) bool { return math.Abs(got-float64(wantNs)/1e6) <= 0.051 }

func countNodes(n live.FlameNode) int {
	c := 1
	for _, ch := range n.Children {
		c += countNodes(*ch)
	}
	return c
}

// waitReady waits for the trace page's first load.
func (p *page) waitReady(path string) {
	p.t.Helper()
	err := chromedp.Do(p.ctx, chromedp.Navigate(p.base+path),
		chromedp.Action[chromedp.Void](func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Poll[bool](`document.documentElement.dataset.ready === "1"`,
				chromedp.WithPollingTimeout(30*time.Second))(ctx, t)
			return chromedp.Void{}, err
		}))
	if err != nil {
		p.t.Fatalf("open %s: %v", path, err)
	}
	if s := eval[string](p, `document.getElementById('status').textContent`); s != "" {
		p.t.Fatalf("%s: page status %q", path, s)
	}
}

// TestLiveTracePages fills a real serve's window with 1,000 traces over
// OTLP/gRPC, then checks what the trace list, one trace view and its span
// flame graphs show against /api, failing on any page error.
func TestLiveTracePages(t *testing.T) {
	testutil.RequireLong(t, "fills a serve with 1,000 traces and drives chromium")
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("skip: %s not found; install Debian's chromium package (apt-get install -y chromium) to run the browser tests", chromium)
	}
	otlpAddr, webAddr := startServe(t)
	fillWindow(t, otlpAddr)
	base := "http://" + webAddr
	var st live.Stats
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		apiGet(t, base+"/api/window", &st)
		if st.Traces == liveTraces && st.Spans == 3*liveTraces || time.Now().After(deadline) {
			break
		}
	}
	if st.Traces != liveTraces || st.Spans != 3*liveTraces {
		t.Fatalf("window holds %d traces and %d spans, want %d and %d", st.Traces, st.Spans, liveTraces, 3*liveTraces)
	}
	var list []live.TraceSummary
	apiGet(t, base+"/api/traces?limit=1000", &list)
	p := newBrowser(t, base)

	start := time.Now()
	p.waitReady("/trace/")
	t.Logf("trace list of %d traces ready in %v (page: %s ms)", len(list), time.Since(start).Round(time.Millisecond),
		eval[string](p, `document.documentElement.dataset.renderMs`))
	if got := eval[string](p, `document.documentElement.dataset.traces`); got != fmt.Sprint(liveTraces) || len(list) != liveTraces {
		t.Fatalf("list page shows %s traces, /api/traces %d, want %d", got, len(list), liveTraces)
	}
	rows := eval[[][]string](p, `[...document.querySelectorAll('#traces tbody tr')].map((r) => [...r.cells].map((c) => c.textContent))`)
	if len(rows) != len(list) {
		t.Fatalf("list table has %d rows, /api/traces %d", len(rows), len(list))
	}
	for i, r := range rows {
		a := list[i]
		if r[0] != a.TraceID || r[1] != a.Root || r[2] != a.Service || r[5] != fmt.Sprint(a.Spans) || r[6] != fmt.Sprint(a.SampledSpans) ||
			!closeMs(msText(t, r[7]), a.OnCPUNs) || !closeMs(msText(t, r[8]), a.OffCPUNs) || !closeMs(msText(t, r[4]), a.WallNs) {
			t.Errorf("list row %d = %q, /api/traces %+v", i, r, a)
		}
	}
	p.checkNoErrors()

	// A trace with the most on-CPU ticks, from the middle of the list.
	id := list[liveTraces/2].TraceID
	var tv live.TraceView
	apiGet(t, base+"/api/trace/"+id, &tv)
	p.waitReady("/trace/" + id)
	if got := eval[string](p, `document.documentElement.dataset.spans`); got != fmt.Sprint(len(tv.Spans)) || len(tv.Spans) != 3 {
		t.Fatalf("trace page shows %s spans, /api %d, want 3", got, len(tv.Spans))
	}
	srows := eval[[][]string](p, `[...document.querySelectorAll('#spans tbody tr')].map((r) => [r.dataset.spanId, ...[...r.cells].map((c) => c.textContent)])`)
	var render, db live.SpanView
	for i, s := range tv.Spans {
		r := srows[i]
		name := strings.TrimSuffix(r[1], "no samples")
		if r[0] != s.SpanID || name != s.Name || r[2] != s.Service || r[3] != s.SpanID || r[9] != fmt.Sprint(s.Samples) ||
			!closeMs(msText(t, r[5]), s.WallNs) || !closeMs(msText(t, r[6]), s.OnCPUNs) || !closeMs(msText(t, r[7]), s.OffCPUNs) {
			t.Errorf("span row %d = %q, /api %+v", i, r, s)
		}
		switch s.Name {
		case "render":
			render = s
		case "db query":
			db = s
		}
	}
	if render.OnCPUNs == 0 || db.OffCPUNs == 0 {
		t.Fatalf("render on-CPU %d, db query off-CPU %d: the samples sent are not in the view", render.OnCPUNs, db.OffCPUNs)
	}
	// The page opens the first sampled span's flame graph by itself; then
	// the other span's off-CPU one through its button.
	for _, sel := range []struct {
		span  live.SpanView
		kind  string
		click string
	}{
		{db, "off", ""},
		{render, "on", `[...document.querySelectorAll('#spans tbody tr')].find((r) => r.dataset.spanId === '` + render.SpanID + `').querySelectorAll('button')[0].click()`},
	} {
		var f live.FlameNode
		apiGet(t, base+"/api/trace/"+id+"/flame?span_id="+sel.span.SpanID+"&kind="+sel.kind, &f)
		if sel.click != "" {
			eval[any](p, `delete document.documentElement.dataset.flameFrames; `+sel.click)
		}
		want := fmt.Sprintf("span %s · %s-CPU", sel.span.SpanID, sel.kind)
		if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](`!!document.documentElement.dataset.flameFrames && document.getElementById('flame-info').textContent.startsWith('`+want+`')`,
			chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			t.Fatalf("flame graph of %s %s-CPU not drawn: %v", sel.span.Name, sel.kind, err)
		}
		info := eval[string](p, `document.getElementById('flame-info').textContent`)
		frames := eval[string](p, `document.documentElement.dataset.flameFrames`)
		drawn := eval[[]string](p, `[...document.querySelectorAll('#flame .frame')].map((d) => d.textContent)`)
		_, v, _ := strings.Cut(info, "CPU · ")
		if !closeMs(msText(t, v), f.Value) || frames != fmt.Sprint(countNodes(f)) || len(drawn) != countNodes(f) {
			t.Errorf("%s %s-CPU flame: page %q, %s frames (%d drawn), /api value %d ns with %d nodes", sel.span.Name, sel.kind, info, frames, len(drawn), f.Value, countNodes(f))
		}
		t.Logf("%s %s-CPU flame graph: %s, %s frames, as /api", sel.span.Name, sel.kind, v, frames)
	}
	p.checkNoErrors()
}
