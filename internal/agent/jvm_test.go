package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spanprof/spanprof/internal/jvm/jvmtest"
	"github.com/spanprof/spanprof/internal/pipeline"
	"github.com/spanprof/spanprof/internal/testutil"
)

// hotJVM is a running internal/jvm testdata Hot.java.
type hotJVM struct {
	pid   int // host pid
	nspid int // pid in its own namespace
	cmd   *exec.Cmd
}

// startHot runs Hot.java (internal/jvm/jvmtest) with frame pointers
// under wrap (a command that ends by running its arguments, or nothing).
func startHot(t *testing.T, wrap []string, args ...string) *hotJVM {
	t.Helper()
	cmd := jvmtest.Start(t, jvmtest.Options{Wrap: wrap, Flags: []string{"-XX:+PreserveFramePointer"}}, args...)
	j := &hotJVM{pid: cmd.Process.Pid, cmd: cmd}
	t.Cleanup(func() {
		_ = syscall.Kill(j.pid, syscall.SIGKILL)
		if j.nspid == j.pid {
			os.Remove(fmt.Sprintf("/tmp/perf-%d.map", j.pid))
		}
	})
	if len(wrap) > 0 {
		// The JVM is the wrapper's only child (unshare --fork).
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", j.pid, j.pid))
		if err != nil || len(bytes.Fields(b)) != 1 {
			t.Fatalf("find the JVM under %v: %q %v", wrap, b, err)
		}
		j.pid, _ = strconv.Atoi(string(bytes.Fields(b)[0]))
	}
	j.nspid = nsPID(t, j.pid)
	if j.nspid == j.pid {
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", j.pid)) // none but ours
	}
	return j
}

func nsPID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(rest)
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	t.Fatalf("pid %d has no NSpid", pid)
	return 0
}

// threadShares reads, over the samples of pid's threads named prefix*,
// the share whose leaf frame is fn and the share whose root frame is
// start_thread (the thread's entry).
func threadShares(t *testing.T, samples []e2eSample, pid int, prefix, fn string) (named, entry float64, n int) {
	t.Helper()
	var hit, reach int
	leaves := map[string]int{}
	for _, s := range samples {
		if p, _ := s.resource["process.pid"].(int64); p != int64(pid) || s.kind == "off_cpu" ||
			!strings.HasPrefix(s.attrs["thread.name"], prefix) || len(s.frames) == 0 {
			continue
		}
		c := len(s.times)
		n += c
		leaves[s.frames[0]] += c
		if s.frames[0] == fn {
			hit += c
		}
		if reachesThreadEntry(s.frames) {
			reach += c
		}
	}
	if n == 0 {
		t.Errorf("no samples of pid %d %s* threads", pid, prefix)
		return 0, 0, 0
	}
	if float64(hit) < 0.95*float64(n) {
		t.Logf("pid %d %s* leaves: %v", pid, prefix, leaves)
	}
	return float64(hit) / float64(n), float64(reach) / float64(n), n
}

// reachesThreadEntry says whether a stack (leaf first) ends at the
// thread's entry: start_thread, or start_thread and below it glibc's
// clone3, which calls it, as cmd/spanprof's JVM test judges it. The
// frame-pointer chain ends at start_thread; its unwind rules, where the
// walk went by them, lead one frame further, to clone3, whose own rules
// mark it the outermost frame.
func reachesThreadEntry(frames []string) bool {
	n := len(frames)
	switch frames[n-1] {
	case "start_thread":
		return true
	case "clone3", "__clone3", "clone", "__clone":
		return n >= 2 && frames[n-2] == "start_thread"
	}
	return false
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s{%s}", name, label)
	return 0
}

// TestAgentJVMMethodNames runs the agent with the real sampler against
// real JVMs, no manual step: the agent asks them for their perf maps.
// One JVM's Hot.late is first run (and compiled) after the agent
// started; another is killed before the report that holds its samples;
// a third runs in its own mount and pid namespaces with a private /tmp,
// as in a container, where its socket and map are
// /proc/PID/root/tmp/.java_pid1 and perf-1.map.
func TestAgentJVMMethodNames(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("java"); err != nil {
		t.Skip("no java on PATH")
	}
	if testing.Short() {
		t.Skip("runs three JVMs and the agent for about 20s")
	}
	host := startHot(t, nil, "1", "4000")
	gone := startHot(t, nil, "1")
	var ctr *hotJVM
	ctrStart := time.Now()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Log("no unshare: the container JVM is left out")
	} else {
		ctr = startHot(t, []string{"unshare", "--mount", "--pid", "--fork", "--mount-proc", "sh", "-c",
			`mount -t tmpfs tmpfs /tmp && exec "$@"`, "sh"}, "1")
		if ctr.nspid != 1 {
			t.Fatalf("container JVM has namespace pid %d, want 1", ctr.nspid)
		}
	}

	col := startFakeCollector(t, freeAddr(t), nil)
	cfg := testConfig(col.addr)
	cfg.Frequency = 99
	cfg.Export.ReportInterval = 10 * time.Second
	cfg.MetricsListen = ""
	pids := []int{host.pid, gone.pid}
	if ctr != nil {
		pids = append(pids, ctr.pid)
	}
	cfg.Processes.PIDs = pids
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The pipeline the agent command builds (its stack windows included).
	pc, err := cfg.Pipeline(log)
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Open(pc)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	reg := prometheus.NewRegistry()
	a, err := New(cfg, p, Options{Logger: log, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if !a.AttachesJVMs() {
		t.Fatal("the agent does not ask JVMs by default")
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// The first scheduled request is at 5s; the killed JVM lives past it
	// and dies before the first report, at 10s.
	time.Sleep(7 * time.Second)
	if err := syscall.Kill(gone.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gone.cmd.Wait()
	if ctr != nil {
		sock := fmt.Sprintf("/proc/%d/root/tmp/.java_pid1", ctr.pid)
		if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("container JVM: no attach socket at %s: %v", sock, err)
		}
		for _, p := range []string{"/tmp/.java_pid1", fmt.Sprintf("/tmp/.java_pid%d", ctr.pid), "/tmp/perf-1.map", fmt.Sprintf("/tmp/perf-%d.map", ctr.pid)} {
			// A file from before the container JVM started is another
			// process's, gone, that had the same pid (a JVM killed
			// earlier in the run leaves its socket).
			if fi, err := os.Stat(p); err == nil && !fi.ModTime().Before(ctrStart) {
				t.Errorf("container JVM: %s exists on the host's /tmp, made %v after the JVM started", p, fi.ModTime().Sub(ctrStart))
			} else if err == nil {
				t.Logf("container JVM: %s on the host's /tmp is older than the JVM: another process's", p)
			}
		}
	}
	time.Sleep(7 * time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var samples []e2eSample
	for _, pd := range col.received() {
		samples = appendSamples(samples, pd)
	}
	ok := counterValue(t, reg, "spanprof_jvm_perfmap_requests_total", "ok")
	failed := counterValue(t, reg, "spanprof_jvm_perfmap_requests_total", "failed")
	secs := counterValue(t, reg, "spanprof_jvm_perfmap_seconds_total", "")
	t.Logf("%d batches; JVM perf-map requests: %v ok, %v failed, %.1f ms in all (%.1f ms each)",
		len(col.received()), ok, failed, 1000*secs, 1000*secs/max(ok+failed, 1))
	if ok == 0 || failed != 0 {
		t.Errorf("perf-map requests: %v ok, %v failed; want some and no failure", ok, failed)
	}
	type want struct {
		what         string
		pid          int
		prefix, fn   string
		checkEntries bool
	}
	checks := []want{
		{"host JVM", host.pid, "hot-worker", "long Hot.work(long)", true},
		{"host JVM, compiled after the start", host.pid, "late-worker", "long Hot.late(long)", true},
		{"JVM killed before the report", gone.pid, "hot-worker", "long Hot.work(long)", false},
	}
	if ctr != nil {
		checks = append(checks, want{"container JVM", ctr.pid, "hot-worker", "long Hot.work(long)", true})
	}
	for _, c := range checks {
		named, entry, n := threadShares(t, samples, c.pid, c.prefix, c.fn)
		t.Logf("%s: %d samples of %s*, %.1f%% name %s, %.1f%% reach the thread entry", c.what, n, c.prefix, 100*named, c.fn, 100*entry)
		if named < 0.95 {
			t.Errorf("%s: %.1f%% of %d samples name %s, want >= 95%%", c.what, 100*named, n, c.fn)
		}
		if c.checkEntries && entry < 0.95 {
			t.Errorf("%s: %.1f%% of %d samples reach the thread entry (start_thread), want >= 95%%", c.what, 100*entry, n)
		}
	}
}
