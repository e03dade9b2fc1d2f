// Package trace runs the trace view end to end as a user would: `spanprof
// serve --otlp-listen`, a Go service exporting spans with the OpenTelemetry
// SDK (and sdk/go), a C service publishing its spans with sdk/c (exported
// through the SDK on its behalf), and `spanprof agent` exporting their
// profiles to serve. It checks the per-span on-CPU and off-CPU times of
// /api/trace/ID against the work the services measured themselves.
package trace

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/spanprof/spanprof/internal/testutil"
	"github.com/spanprof/spanprof/internal/web/live"
)

// logSteal logs, at the end of the test, the time this virtual machine's
// CPUs were stolen while it ran (/proc/stat): steal inside a burst is
// sampled on-CPU but not in thread CPU time (truth.runNs).
func logSteal(t *testing.T) {
	steal := func() float64 {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0
		}
		var user, nice, sys, idle, iowait, irq, softirq, st float64
		fmt.Sscanf(string(b), "cpu %g %g %g %g %g %g %g %g", &user, &nice, &sys, &idle, &iowait, &irq, &softirq, &st)
		return st * 10 // USER_HZ is 100 on Linux
	}
	s0 := steal()
	t.Cleanup(func() { t.Logf("CPU time stolen from this machine during the test: %.0f ms", steal()-s0) })
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type proc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv starts name with env added to the test's environment.
func startEnv(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return &proc{cmd, in, bufio.NewScanner(out)}
}

func (p *proc) line(t *testing.T, prefix string) []string {
	t.Helper()
	for p.out.Scan() {
		if f := strings.Fields(p.out.Text()); len(f) > 0 && f[0] == prefix {
			return f
		}
	}
	t.Fatalf("%s: no %q line: %v", p.cmd.Path, prefix, p.out.Err())
	return nil
}

func build(t *testing.T, dir string) (spanprof, gosvc, csvc string) {
	root, _ := filepath.Abs("../..")
	spanprof, gosvc, csvc = filepath.Join(dir, "spanprof"), filepath.Join(dir, "goservice"), filepath.Join(dir, "cservice")
	for _, c := range []*exec.Cmd{
		exec.Command("go", "build", "-o", spanprof, "./cmd/spanprof"),
		exec.Command("go", "build", "-o", gosvc, "."),
		exec.Command("gcc", "-O1", "-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-Wl,--build-id=sha1", "-rdynamic",
			"-I", filepath.Join(root, "sdk/c"), "-o", csvc, filepath.Join(root, "testdata/tracework/cservice/cservice.c")),
	} {
		c.Dir = root
		if strings.HasSuffix(c.Args[len(c.Args)-1], ".") {
			c.Dir = filepath.Join(root, "testdata/tracework/goservice")
		}
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c.Args, err, out)
		}
	}
	return
}

// fixedID makes the SDK give the C service's span the id the C service
// published to the profiler.
type fixedID struct{ next trace.SpanID }

func (f *fixedID) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	return trace.TraceID{}, f.next
}
func (f *fixedID) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return f.next }

// onCPUHz is the agent's on-CPU frequency in these tests. Its period must
// be well under the kernel's scheduler tick (4 ms at CONFIG_HZ=250): on a
// loaded machine CPU-bound threads take turns at tick boundaries, and at
// 199 Hz (a period of 5/4 ticks) which turns catch a sample aliases, so
// 250 ms of CPU read anywhere from -30 % to +35 % beside two busy loops.
// At 999 Hz every turn holds about four samples: within ±5 % in the same
// conditions (docs/ui.md).
const onCPUHz = "999"

// truth is what a fixture measured of one span: the thread CPU time of
// its burst, the wall time of its wait, and the time the burst was current
// on a CPU (runNs; 0 where the fixture did not measure it). The on-CPU
// figure is judged against runNs: a CPU-clock sampler counts the time a
// thread is current, and on a virtual machine the thread CPU clock leaves
// out the steal and interrupt time within it (see the fixtures' running).
type truth struct {
	name                 string
	cpuNs, waitNs, runNs int64
}

// onCPU is the on-CPU time the profile should show.
func (w truth) onCPU() int64 {
	if w.runNs > 0 {
		return w.runNs
	}
	return w.cpuNs
}

// parseTruth reads a fixture's "CPU_NS WAIT_NS RUN_NS" fields.
func parseTruth(name string, f []string) truth {
	w := truth{name: name}
	for i, p := range []*int64{&w.cpuNs, &w.waitNs, &w.runNs} {
		if i < len(f) {
			fmt.Sscan(f[i], p)
		}
	}
	return w
}

func TestTraceViewKnownWork(t *testing.T) {
	testutil.RequireRoot(t, "skip: profiling needs root")
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		t.Skip("skip: no BTF at /sys/kernel/btf/vmlinux")
	}
	spanprof, gosvc, csvc := build(t, t.TempDir())
	logSteal(t)
	otlpAddr, webAddr := freePort(t), freePort(t)
	srv := start(t, spanprof, "serve", "--listen", webAddr, "--otlp-listen", otlpAddr)
	srv.line(t, "spanprof:")
	g := start(t, gosvc, "-endpoint", otlpAddr)
	gpid := g.line(t, "ready")[1]
	c := start(t, csvc)
	cpid := c.line(t, "ready")[1]
	agent := start(t, spanprof, "agent", "--endpoint", otlpAddr, "--insecure", "--pid", gpid, "--pid", cpid,
		"--off-cpu", "--frequency", onCPUHz, "--go-wait-frequency", "199", "--report-interval", "1s", "--metrics-listen", "off")
	_ = agent

	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlpAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	ids := &fixedID{}
	ctp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(ids),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("c-service"))))
	defer ctp.Shutdown(ctx)
	ctr := ctp.Tracer("cservice")

	want := map[string]map[string]truth{} // trace → span → truth
	// Warm-up requests run until the agent's samples of both services
	// reach serve: the agent attaches and symbolizes meanwhile.
	deadline := time.Now().Add(60 * time.Second)
	for warm := 0; ; warm++ {
		if time.Now().After(deadline) {
			t.Fatal("no samples of both services reached serve within 60s")
		}
		tr, _ := request(t, ctx, g, c, ctr, ids, 100, 20, 100, 20)
		time.Sleep(1500 * time.Millisecond)
		if tv, ok := getTrace(t, webAddr, tr); ok && sampled(tv, "go cpu") && sampled(tv, "c work") {
			t.Logf("agent ready after %d warm-up requests", warm+1)
			break
		}
	}
	for _, w := range []struct{ goCPU, goSleep, cCPU, cSleep int }{{300, 250, 250, 200}, {150, 400, 400, 100}, {60, 100, 60, 60}} {
		// The Go sleep stays ≥ 100 ms: one run attributed 12.5 ms to a
		// 62 ms time.Sleep (parked goroutines are sampled by internal/gowait,
		// not timed by sched_switch); that gap is open, not hidden here.
		tr, spans := request(t, ctx, g, c, ctr, ids, w.goCPU, w.goSleep, w.cCPU, w.cSleep)
		want[tr] = spans
	}
	// Wait until the agent's reports have landed: two equal reads.
	settle(t, webAddr, want)
	checkKnownWork(t, webAddr, want, 12)
}

func sampled(tv live.TraceView, name string) bool {
	for _, s := range tv.Spans {
		if s.Name == name && s.Samples > 0 {
			return true
		}
	}
	return false
}

func getTrace(t *testing.T, webAddr, tr string) (live.TraceView, bool) {
	var tv live.TraceView
	resp, err := http.Get("http://" + webAddr + "/api/trace/" + tr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return tv, false
	}
	if err := json.NewDecoder(resp.Body).Decode(&tv); err != nil {
		t.Fatalf("decode trace %s: %v", tr, err)
	}
	return tv, true
}

// request runs one trace through both services and returns its id and
// the work each span measured.
func request(t *testing.T, ctx context.Context, g, c *proc, ctr trace.Tracer, ids *fixedID, goCPU, goSleep, cCPU, cSleep int) (string, map[string]truth) {
	w := struct{ goCPU, goSleep, cCPU, cSleep int }{goCPU, goSleep, cCPU, cSleep}
	{
		fmt.Fprintf(g.in, "req %d %d\n", w.goCPU, w.goSleep)
		var tr string
		spans := map[string]truth{}
		for {
			f := g.line2(t)
			if f[0] == "truth" {
				spans[f[1]] = parseTruth(f[2], f[3:])
				continue
			}
			if f[0] != "call" {
				continue
			}
			tr = f[1]
			fmt.Fprintf(c.in, "%s %s %d %d\n", f[1], f[2], w.cCPU, w.cSleep)
			cf := c.line(t, "span")
			var startNs, endNs int64
			fmt.Sscan(cf[2], &startNs)
			fmt.Sscan(cf[3], &endNs)
			sid, _ := hex.DecodeString(cf[1])
			ids.next = trace.SpanID(sid)
			tid, _ := trace.TraceIDFromHex(f[1])
			psid, _ := trace.SpanIDFromHex(f[2])
			parent := trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
				TraceID: tid, SpanID: psid, TraceFlags: trace.FlagsSampled, Remote: true}))
			_, s := ctr.Start(parent, "c work", trace.WithTimestamp(time.Unix(0, startNs)), trace.WithSpanKind(trace.SpanKindServer))
			s.End(trace.WithTimestamp(time.Unix(0, endNs)))
			spans[cf[1]] = parseTruth("c-work", cf[4:])
			fmt.Fprintln(g.in, "ok")
			g.line(t, "done")
			break
		}
		return tr, spans
	}
}

// checkKnownWork compares each span with known work against the trace
// view (±10 % for figures of at least 50 ms, at least minChecked of them)
// and bounds every span of the traces by its wall time per thread.
func checkKnownWork(t *testing.T, webAddr string, want map[string]map[string]truth, minChecked int) {
	checked := 0
	for tr, spans := range want {
		tv, ok := getTrace(t, webAddr, tr)
		if !ok {
			t.Errorf("trace %s: not in the window", tr)
			continue
		}
		got := map[string]live.SpanView{}
		for _, s := range tv.Spans {
			got[s.SpanID] = s
			checkWallBound(t, tr, s)
		}
		if root := tv.Spans[0]; root.Name != "handle request" || root.Service != "go-service" {
			t.Errorf("trace %s: first span %q of %q, want the Go root", tr, root.Name, root.Service)
		}
		for sid, w := range spans {
			s, ok := got[sid]
			if !ok || !s.Exported {
				t.Errorf("trace %s span %s (%s): not exported in the view", tr, sid, w.name)
				continue
			}
			for _, m := range []struct {
				what      string
				got, want int64
			}{{"on-CPU", s.OnCPUNs, w.onCPU()}, {"off-CPU", s.OffCPUNs, w.waitNs}} {
				if m.want == 0 {
					t.Logf("%-8s %-22s %-7s %8.1f ms (no known work)", w.name, s.Name, m.what, float64(m.got)/1e6)
					continue
				}
				e := float64(m.got-m.want) / float64(m.want)
				cpu := ""
				if m.what == "on-CPU" && w.runNs > 0 {
					cpu = fmt.Sprintf(", thread CPU time %.1f ms", float64(w.cpuNs)/1e6)
				}
				t.Logf("%-8s %-22s %-7s %8.1f ms, known %8.1f ms, error %+6.1f %%  (%s%s)", w.name, s.Name, m.what,
					float64(m.got)/1e6, float64(m.want)/1e6, 100*e, s.Service, cpu)
				if m.want >= 50e6 {
					checked++
					if math.Abs(e) > 0.10 {
						t.Errorf("trace %s span %s %q: %s %.1f ms, known work %.1f ms (%+.1f %%)", tr, sid, s.Name, m.what,
							float64(m.got)/1e6, float64(m.want)/1e6, 100*e)
					}
				}
			}
		}
	}
	if checked < minChecked {
		t.Errorf("checked %d span figures, want %d", checked, minChecked)
	}
}

// checkWallBound fails a span whose time on one thread exceeds its wall
// time: one thread (or one parked goroutine) cannot be on and off the CPU
// in a span for longer than the span lasted. The slack is the sampling's
// own: 10 %, and at least two periods at 199 Hz. The goroutine sampler's
// waits (tid 0) sum all the span's parked goroutines; with the
// connection goroutines detached (sdk/go DetachDial) only the span's own
// is parked in it.
func checkWallBound(t *testing.T, tr string, s live.SpanView) {
	t.Helper()
	t.Logf("span %-16s %-10s wall %7.1f ms: on %7.1f ms, off %7.1f ms, outside its time %6.1f ms in %d samples",
		s.Name, s.Service, float64(s.WallNs)/1e6, float64(s.OnCPUNs)/1e6, float64(s.OffCPUNs)/1e6, float64(s.OutsideNs)/1e6, s.OutsideSamples)
	if !s.Exported {
		return
	}
	limit := s.WallNs + max(s.WallNs/10, 2*int64(1e9)/199)
	for _, th := range s.ByThread {
		if busy := th.OnCPUNs + th.OffCPUNs; busy > limit {
			t.Errorf("trace %s span %s %q: thread %d/%d (%s) on %.1f + off %.1f ms, more than the span's wall time %.1f ms",
				tr, s.SpanID, s.Name, th.PID, th.TID, th.Name, float64(th.OnCPUNs)/1e6, float64(th.OffCPUNs)/1e6, float64(s.WallNs)/1e6)
		}
	}
}

// settle waits until the window holds what the requests produced: every
// span with known work exported, and two reads 1.5 s apart (more than
// the agent's report interval) equal in every span's export, on-CPU and
// off-CPU figures. It gives up after 30 s; the checks then say what is
// missing.
func settle(t *testing.T, webAddr string, want map[string]map[string]truth) {
	prev := ""
	for i := 0; i < 20; i++ {
		time.Sleep(1500 * time.Millisecond)
		var sb strings.Builder
		missing := 0
		for tr, spans := range want {
			tv, _ := getTrace(t, webAddr, tr)
			exported := map[string]bool{}
			for _, s := range tv.Spans {
				exported[s.SpanID] = s.Exported
				fmt.Fprintf(&sb, "%s %v %d %d;", s.SpanID, s.Exported, s.OnCPUNs, s.OffCPUNs)
			}
			for sid := range spans {
				if !exported[sid] {
					missing++
				}
			}
		}
		if missing == 0 && sb.String() == prev {
			return
		}
		prev = sb.String()
	}
	t.Logf("the window did not settle within 30 s")
}

// line2 returns the next line's fields, whatever its first word.
func (p *proc) line2(t *testing.T) []string {
	t.Helper()
	for p.out.Scan() {
		if f := strings.Fields(p.out.Text()); len(f) > 0 {
			return f
		}
	}
	t.Fatalf("%s: ended: %v", p.cmd.Path, p.out.Err())
	return nil
}
