package agent

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/testutil"
)

// The end-to-end test runs the real `spanprof agent` against a real
// OpenTelemetry Collector (test/collector: otlp receiver, profiles
// pipeline, file exporter) and real fixture processes. It needs root to
// load the eBPF programs. SPANPROF_TESTCOL names a prebuilt collector
// binary; otherwise the test builds it (minutes on a cold module cache).

const collectorConfig = `receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  profilefile:
    path: %s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [profilefile]
`

func TestAgentE2E(t *testing.T) {
	testutil.RequireRoot(t)
	if testing.Short() {
		t.Skip("builds the collector and runs for about 15s")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	col := buildTestCollector(t, root)
	bin := buildSpanprof(t, root)
	testutil.Fixtures(t, "fixtures", nil)
	testutil.Fixtures(t, "tracectx", nil)
	chainPath := filepath.Join(root, "testdata", "fixtures", "build", "chain-clang")
	workPath := filepath.Join(root, "testdata", "tracectx", "build", "workload-clang")

	start := time.Now()
	chain := startReady(t, chainPath, "12000", filepath.Join(dir, "marks"))
	truthPath := filepath.Join(dir, "truth")
	work := startReady(t, workPath, truthPath, "5", "2")

	// The agent starts while the collector is down: what it samples then
	// waits in its queue and must arrive once the collector is up.
	endpoint := freeAddr(t)
	cfgPath := filepath.Join(dir, "agent.yaml")
	agentCfg := "export:\n  retry:\n    initial_interval: 200ms\n    max_interval: 1s\n"
	if err := os.WriteFile(cfgPath, []byte(agentCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var agentOut syncBuffer
	agent := exec.Command(bin, "agent", "--config", cfgPath, "--endpoint", endpoint, "--insecure",
		"--report-interval", "1s", "--pid", fmt.Sprint(chain.Process.Pid), "--pid", fmt.Sprint(work.Process.Pid),
		"--frequency", "99", "--off-cpu", "--metrics-listen", "127.0.0.1:0")
	agent.Stdout, agent.Stderr = &agentOut, &agentOut
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	t.Cleanup(func() {
		_ = agent.Process.Kill()
		if t.Failed() {
			t.Logf("agent output:\n%s", agentOut.String())
		}
	})
	metricsRe := regexp.MustCompile(`msg="serving metrics" address=(\S+)`)
	waitFor(t, "agent metrics server", 10*time.Second, func() bool { return metricsRe.MatchString(agentOut.String()) })
	metricsAddr := metricsRe.FindStringSubmatch(agentOut.String())[1]

	time.Sleep(2500 * time.Millisecond)
	collectorUp := time.Now()
	out := filepath.Join(dir, "profiles.jsonl")
	colCfg := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(colCfg, []byte(fmt.Sprintf(collectorConfig, endpoint, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	var colOut syncBuffer
	collector := exec.Command(col, "--config", colCfg, "--feature-gates=service.profilesSupport")
	collector.Stdout, collector.Stderr = &colOut, &colOut
	if err := collector.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = collector.Process.Signal(syscall.SIGTERM)
		_ = collector.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", colOut.String())
		}
	})
	waitFor(t, "collector listening", 20*time.Second, func() bool {
		c, err := net.Dial("tcp", endpoint)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	if err := work.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	time.Sleep(2 * time.Second)
	_, metrics := get(t, "http://"+metricsAddr+"/metrics")
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-agentDone:
		if err != nil {
			t.Fatalf("agent exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not stop within 15s of SIGTERM")
	}
	end := time.Now()

	batches, samples := readBatches(t, out)
	events := 0
	for _, s := range samples {
		events += len(s.times)
	}
	t.Logf("collector wrote %d batches, %d samples of %d events", batches, len(samples), events)
	// Nothing lost between the sampler and the collector: the agent's
	// own account at exit matches what the collector wrote.
	stopRe := regexp.MustCompile(`msg="agent stopped" samples_collected=(\d+) .*samples_sent=(\d+) samples_dropped=(\d+)`)
	m := stopRe.FindStringSubmatch(agentOut.String())
	if m == nil {
		t.Fatalf("no exit account in the agent's log")
	}
	if m[1] != fmt.Sprint(events) || m[2] != fmt.Sprint(events) || m[3] != "0" {
		t.Errorf("agent collected %s, sent %s, dropped %s samples; the collector wrote %d", m[1], m[2], m[3], events)
	}
	if batches < 3 {
		t.Errorf("%d batches arrived, want at least 3 (one a second)", batches)
	}
	checkE2ESamples(t, samples, e2eWant{
		chainPID: int64(chain.Process.Pid), workPID: int64(work.Process.Pid),
		chainBuildID: gnuBuildID(t, chainPath), start: start, collectorUp: collectorUp, end: end,
		truth: readTruthIDs(t, truthPath),
	})
	for _, want := range []string{
		`result="Unavailable"`, // attempts while the collector was down
		"spanprof_export_batches_total",
		"spanprof_samples_taken_total",
		"spanprof_processes_tracked",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every drop series exists from the start (at 0, for alerts); none
	// may have counted a drop within the queue bound.
	series := 0
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "spanprof_export_dropped_batches_total{") {
			series++
			if !strings.HasSuffix(l, " 0") {
				t.Errorf("batches dropped within the queue bound:\n%s", grepLines(metrics, "dropped"))
			}
		}
	}
	if series != len(dropReasons) {
		t.Errorf("%d drop series, want one per reason (%d):\n%s", series, len(dropReasons), grepLines(metrics, "dropped"))
	}
}

type e2eWant struct {
	chainPID, workPID       int64
	chainBuildID            string
	start, collectorUp, end time.Time
	truth                   map[string]bool // "trace/span"
}

func checkE2ESamples(t *testing.T, samples []e2eSample, w e2eWant) {
	t.Helper()
	host, _ := os.Hostname()
	var chainN, workN, beforeUp, chained, linked, linkedRight, offCPU int
	var blocked time.Duration
	for _, s := range samples {
		pid, _ := s.resource["process.pid"].(int64)
		if s.resource["host.name"] != host {
			t.Fatalf("host.name = %v, want %q", s.resource["host.name"], host)
		}
		if len(s.times) == 0 || len(s.times) != len(s.values) {
			t.Fatalf("sample with %d timestamps and %d values", len(s.times), len(s.values))
		}
		for _, ts := range s.times {
			if ts < uint64(w.start.UnixNano()) || ts > uint64(w.end.UnixNano()) {
				t.Fatalf("timestamp %v outside the run [%v, %v]", time.Unix(0, int64(ts)), w.start, w.end)
			}
			if ts < uint64(w.collectorUp.UnixNano()) {
				beforeUp++
			}
		}
		switch pid {
		case w.chainPID:
			if s.kind == "off_cpu" {
				// The fixture sleeps 20 ms between busy windows.
				offCPU += len(s.times)
				for _, v := range s.values {
					blocked += time.Duration(v)
				}
				if s.attrs["thread.state"] == "" || s.attrs["thread.id"] == "" {
					t.Errorf("off-CPU sample without thread.state or thread.id: %v", s.attrs)
				}
				continue
			}
			chainN += len(s.times)
			if s.resource["process.executable.name"] != "chain-clang" || !strings.HasSuffix(fmt.Sprint(s.resource["process.executable.path"]), "/chain-clang") {
				t.Fatalf("chain resource %v", s.resource)
			}
			if strings.Contains(strings.Join(s.frames, ";"), "level5;level4;level3;level2;level1;main") {
				chained += len(s.times)
				if got := s.mappings["chain-clang"]; got != w.chainBuildID {
					t.Errorf("chain-clang mapping build ID %q, want %q", got, w.chainBuildID)
				}
			}
		case w.workPID:
			workN += len(s.times)
			if s.trace != "" {
				linked += len(s.times)
				if w.truth[s.trace+"/"+s.span] {
					linkedRight += len(s.times)
				}
			}
		}
	}
	t.Logf("chain %d samples (%d with the full chain), workload %d (%d linked, %d to a real span), %d sampled before the collector was up",
		chainN, chained, workN, linked, linkedRight, beforeUp)
	t.Logf("chain off-CPU: %d samples, %v blocked", offCPU, blocked)
	if offCPU == 0 || blocked < 500*time.Millisecond {
		t.Errorf("chain-clang off-CPU: %d samples, %v blocked; want its sleeps (20 ms per 100 ms)", offCPU, blocked)
	}
	if chainN < 100 || chained < chainN/2 {
		t.Errorf("chain-clang: %d samples, %d with level5..main; want ≥ 100 and most", chainN, chained)
	}
	if beforeUp == 0 {
		t.Error("nothing sampled while the collector was down arrived")
	}
	if workN == 0 || linked < workN/2 {
		t.Errorf("workload: %d samples, %d linked; want most linked", workN, linked)
	}
	if linkedRight != linked {
		t.Errorf("%d of %d linked samples name a span the workload never ran", linked-linkedRight, linked)
	}
}

// readTruthIDs reads the workload's spans as "trace/span".
func readTruthIDs(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			out[f[1]+"/"+f[2]] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("the workload recorded no spans")
	}
	return out
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
