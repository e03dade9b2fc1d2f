package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/pipeline/pipelinetest"
	"github.com/spanprof/spanprof/internal/proc"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
)

// testPipeline builds cfg's pipeline on src, with parts, as pipeline.Open
// does on the sampler it loads; log nil discards.
func testPipeline(t *testing.T, cfg Config, src pipeline.Source, parts pipeline.Parts, log *slog.Logger) *pipeline.Pipeline {
	t.Helper()
	pc, err := cfg.Pipeline(log)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(pc, src, parts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// fakeSource stands in for the eBPF sampler, with counters of every kind.
type fakeSource struct {
	*pipelinetest.Source
	stopped *atomic.Bool
}

func newFakeSource() *fakeSource {
	s := pipelinetest.NewSource(1024 + 16)
	s.Counts = map[string]uint64{
		"samples": 120, "lost_ringbuf_full": 3, "lost_queue_full": 0, "user_stack_error": 2, "exit_vmas_dropped": 4,
	}
	return &fakeSource{Source: s, stopped: &s.Stopped}
}

// noKernel leaves kernel addresses unsymbolized without reading kallsyms.
type noKernel struct{}

func (noKernel) Frames(dst []profile.Frame, addr uint64) []profile.Frame {
	return append(dst, profile.Frame{Address: addr})
}

// busyFunc is a real function of the test binary, so the collector
// symbolizes its address.
//
//go:noinline
func busyFunc() int { return os.Getpid() }

func userPC() uint64 { return uint64(reflect.ValueOf(busyFunc).Pointer()) }

func testRecord(pid uint32, t time.Time) *sampler.Record {
	return &sampler.Record{
		PID: pid, TID: pid, Comm: "agent.test", Time: t, Value: 1,
		UserStack: []uint64{userPC() + 1},
	}
}

// fakeCorrelator names a service for every process.
type fakeCorrelator struct {
	mu      sync.Mutex
	seen    map[uint32]int
	forgets int
}

func (c *fakeCorrelator) Seen(pid uint32, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[pid]++
}
func (c *fakeCorrelator) Exec(uint32)    {}
func (c *fakeCorrelator) LinkMap(uint32) {}
func (c *fakeCorrelator) Stats() correlate.Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return correlate.Stats{Scanned: uint64(len(c.seen)), Configured: 1}
}
func (c *fakeCorrelator) Exit(uint32) {}
func (c *fakeCorrelator) ForgetExited(time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgets++
}
func (c *fakeCorrelator) Info(uint32) (correlate.Info, bool) {
	return correlate.Info{ServiceName: "checkout", Resource: map[string]string{"deployment.environment.name": "test"}}, true
}

func testConfig(endpoint string) Config {
	cfg := Default()
	cfg.Export = fastExport()
	cfg.Export.Endpoints = []string{endpoint}
	cfg.Export.ReportInterval = 100 * time.Millisecond
	cfg.HostName = "test-host"
	cfg.MetricsListen = "127.0.0.1:0"
	return cfg
}

func resourceAttrs(pd pprofile.Profiles) []map[string]any {
	var out []map[string]any
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		out = append(out, pd.ResourceProfiles().At(i).Resource().Attributes().AsRaw())
	}
	return out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAgentExportsEveryInterval(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	src := newFakeSource()
	tracker := proc.NewTracker("/proc", nil)
	defer tracker.Close()
	corr := &fakeCorrelator{seen: map[uint32]int{}}
	reg := prometheus.NewRegistry()
	cfg := testConfig(col.addr)
	a, err := New(cfg, testPipeline(t, cfg, src, pipeline.Parts{Tracker: tracker, Kernel: noKernel{}, Correlator: corr}, nil), Options{
		Registry: reg, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	self := uint32(os.Getpid())
	gone := uint32(0x7ffffff0) // no such process: read once, marked exited
	var sent []time.Time
	feed := func(n int) {
		for i := 0; i < n; i++ {
			ts := time.Now()
			sent = append(sent, ts)
			src.Sample(testRecord(self, ts))
		}
	}
	feed(20)
	src.Sample(testRecord(gone, time.Now()))
	got := col.waitReceived(t, 1, 5*time.Second)
	waitFor(t, "exited process forgotten", 2*time.Second, func() bool { return tracker.Len() == 1 })
	time.Sleep(250 * time.Millisecond) // an interval without samples sends nothing
	if n := len(col.received()); n != len(got) {
		t.Errorf("empty intervals sent %d batches", n-len(got))
	}
	feed(14)
	// Taken inside an exec: symbolized against the image read before it.
	pre := testRecord(self, time.Now())
	pre.PreExec, pre.ParentPID = true, 1
	sent = append(sent, pre.Time)
	src.Sample(pre)
	col.waitReceived(t, len(got)+1, 5*time.Second)

	addr := a.MetricsAddr()
	if addr == "" {
		t.Fatal("metrics are not served")
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	_, metrics := get(t, "http://"+addr+"/metrics")
	for _, want := range []string{
		"spanprof_samples_taken_total 120",
		`spanprof_samples_lost_total{reason="ringbuf_full"} 3`,
		`spanprof_sample_errors_total{reason="user_stack_error"} 2`,
		`spanprof_exit_mappings_missing_total{reason="exit_vmas_dropped"} 4`,
		"spanprof_processes_tracked 1",
		"spanprof_processes_retained 1",
		"spanprof_samples_collected_total 36",
		"spanprof_pre_exec_samples_total 1",
		"spanprof_pids_reused_by_fork_total 0",
		`spanprof_export_requests_total{endpoint="` + col.addr + `",result="success"}`,
		`spanprof_export_queue_length{endpoint="` + col.addr + `"} 0`,
		"spanprof_export_duration_seconds_bucket",
		"spanprof_report_build_seconds_count",
		"spanprof_tracectx_scans_total 2",
		"spanprof_tracectx_configured_total 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The last samples go out with the final report on shutdown.
	feed(5)
	src.Proc(sampler.ProcEvent{PID: gone, Exit: true})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !src.stopped.Load() {
		t.Error("source was not stopped")
	}

	all := col.received()
	total := 0
	var times []uint64
	for _, pd := range all {
		total += sampleCount(pd)
		for _, attrs := range resourceAttrs(pd) {
			if attrs["host.name"] != "test-host" {
				t.Errorf("host.name = %v, want test-host", attrs["host.name"])
			}
			if attrs["service.name"] != "checkout" || attrs["deployment.environment.name"] != "test" {
				t.Errorf("resource from the correlator missing: %v", attrs)
			}
			if attrs["process.pid"] == int64(self) && attrs["process.executable.name"] != filepath.Base(mustExe(t)) {
				t.Errorf("process.executable.name = %v, want %s", attrs["process.executable.name"], filepath.Base(mustExe(t)))
			}
		}
		times = append(times, timestamps(pd)...)
	}
	if total != len(sent)+1 {
		t.Errorf("collector got %d samples, want %d", total, len(sent)+1)
	}
	want := map[uint64]bool{}
	for _, ts := range sent {
		want[uint64(ts.UnixNano())] = true
	}
	for _, ts := range times {
		delete(want, ts)
	}
	if len(want) > 0 {
		t.Errorf("%d sample timestamps did not arrive", len(want))
	}
	if !hasFunction(all, "busyFunc") {
		t.Error("no frame symbolized as busyFunc")
	}
	if corr.seen[self] == 0 {
		t.Error("correlator never saw the sampled process")
	}
	if corr.forgets == 0 {
		t.Error("reports never let the correlator forget exited processes")
	}
}

// TestAgentKeepsAnExitedProcessForLaterSamples: the samples of threads
// that outlive their leader's exit event follow it in the stream, and a
// report may come between them. A report forgets only the processes that
// exited a grace (exitGrace) before it, so such a sample still finds its
// process; a report after the grace forgets it.
func TestAgentKeepsAnExitedProcessForLaterSamples(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	src := newFakeSource()
	cfg := testConfig(col.addr)
	cfg.MetricsListen = ""
	tracker := proc.NewTracker("/proc", nil)
	defer tracker.Close()
	a, err := New(cfg, testPipeline(t, cfg, src, pipeline.Parts{Tracker: tracker, Kernel: noKernel{}}, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.closeExporters()
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(child.Process.Pid)
	a.p.Handle(sampler.Event{Sample: testRecord(pid, time.Now())})
	exe := tracker.Get(pid).Exe
	if !strings.HasSuffix(exe, "sleep") {
		t.Fatalf("tracker read pid %d as %q, want sleep", pid, exe)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	a.p.Handle(sampler.Event{Proc: &sampler.ProcEvent{PID: pid, Exit: true, Time: time.Now()}})
	a.report(false)
	a.p.Handle(sampler.Event{Sample: testRecord(pid, time.Now())}) // a thread's, after the exit
	if got := tracker.Get(pid).Exe; got != exe {
		t.Errorf("after a report right after its exit, pid %d reads as %q, want the process that exited (%q)", pid, got, exe)
	}
	time.Sleep(exitGrace + 100*time.Millisecond)
	a.report(false)
	if n := tracker.Len(); n != 0 {
		t.Errorf("a report a grace after the exit left %d processes tracked, want none", n)
	}
}

func TestAgentExecutableFilter(t *testing.T) {
	col := startFakeCollector(t, "127.0.0.1:0", nil)
	src := newFakeSource()
	cfg := testConfig(col.addr)
	cfg.MetricsListen = ""
	cfg.Processes.Executables = []string{filepath.Base(mustExe(t))}
	reg := prometheus.NewRegistry()
	a, err := New(cfg, testPipeline(t, cfg, src, pipeline.Parts{Kernel: noKernel{}}, nil), Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	self := uint32(os.Getpid())
	for i := 0; i < 10; i++ {
		src.Sample(testRecord(self, time.Now()))
		src.Sample(testRecord(0x7ffffff1, time.Now()))
	}
	col.waitReceived(t, 1, 5*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, pd := range col.received() {
		total += sampleCount(pd)
		for _, attrs := range resourceAttrs(pd) {
			if attrs["process.pid"] != int64(self) {
				t.Errorf("a process outside the filter was exported: %v", attrs)
			}
		}
	}
	if total != 10 {
		t.Errorf("exported %d samples, want the 10 of the named executable", total)
	}
	if v := a.p.Stats().Filtered; v != 10 {
		t.Errorf("filtered samples = %v, want 10", v)
	}
}

func mustExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func timestamps(pd pprofile.Profiles) []uint64 {
	var out []uint64
	rps := pd.ResourceProfiles()
	for i := 0; i < rps.Len(); i++ {
		sps := rps.At(i).ScopeProfiles()
		for j := 0; j < sps.Len(); j++ {
			ps := sps.At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				ss := ps.At(k).Samples()
				for l := 0; l < ss.Len(); l++ {
					out = append(out, ss.At(l).TimestampsUnixNano().AsRaw()...)
				}
			}
		}
	}
	return out
}

func hasFunction(pds []pprofile.Profiles, name string) bool {
	for _, pd := range pds {
		d := pd.Dictionary()
		for i := 0; i < d.FunctionTable().Len(); i++ {
			if strings.HasSuffix(d.StringTable().At(int(d.FunctionTable().At(i).NameStrindex())), name) {
				return true
			}
		}
	}
	return false
}
