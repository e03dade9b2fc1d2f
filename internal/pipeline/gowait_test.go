package pipeline

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/gowait/gowaittest"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/testutil"
)

// goBinary is a Go binary other than the test's: the go command.
func goBinary() (string, error) {
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no go command to symbolize: %w", err)
	}
	return p, nil
}

// TestGoWaitRecordsGoThroughTheConsumer: the goroutine-wait sampler names
// entry functions with the pipeline's symbolizer, so that the command's
// bounds cover it, and leaves the process table to the consumer: after a
// tick the symbolizer holds the Go binary, the tracker nothing. Its
// records reach the collector only through the consumer (goroutineWaits,
// HandleBatch), whose tracker then reads the process, and whose
// collector names the parked goroutines' frames and keeps the runtime's
// wait reasons.
func TestGoWaitRecordsGoThroughTheConsumer(t *testing.T) {
	testutil.RequireRoot(t, "reading another process's memory needs root or CAP_SYS_PTRACE")
	cmd, stdin := gowaittest.Start(t, "-duration", "10s", "-out", filepath.Join(t.TempDir(), "truth"))
	pid := cmd.Process.Pid
	if _, err := stdin.Write([]byte("go\n")); err != nil { // its spans start
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.OffCPU = sampler.OffCPUOptions{Enabled: true, Threshold: sampler.DefaultOffCPUThreshold}
	cfg.GoWaitFrequency = 19
	p, err := New(cfg, newFakeSource(), Parts{Kernel: noKernel{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.goWait == nil {
		t.Fatal("no goroutine-wait sampler with off-CPU and a frequency")
	}
	if err := p.goWait.Add(uint32(pid)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the workers park in their spans
	p.goWait.SampleOnce(time.Now())
	if st := p.goWait.Stats(); st.Waiting == 0 {
		t.Fatalf("no parked goroutine read: %+v", st)
	}
	if n := p.tracker.Len(); n != 0 {
		t.Errorf("the pipeline's tracker holds %d processes before the consumer took the tick: the sampler changed the table", n)
	}
	if st := p.symbols.Symbolizer.Stats(); st.Parsed == 0 {
		t.Errorf("the pipeline's symbolizer parsed nothing: the sampler used another")
	}
	if n := p.collector.Stats().Samples; n != 0 {
		t.Fatalf("collector holds %d samples before the consumer took the tick, want none", n)
	}
	var batch []sampler.Record
	select {
	case batch = <-p.goroutineWaits():
	default:
		t.Fatal("the tick delivered no batch")
	}
	p.HandleBatch(batch)
	if n := p.collector.Stats().Samples; n != uint64(len(batch)) || n == 0 {
		t.Fatalf("collector holds %d samples, want the batch's %d", n, len(batch))
	}
	if p.tracker.Len() == 0 {
		t.Errorf("the consumer's tracker holds no process after the batch")
	}
	prof := p.collector.Build(time.Now())
	named := 0
	for _, s := range prof.Samples {
		if s.Kind != profile.OffCPU || s.PID != uint32(pid) || s.State != "S" || s.ThreadName != "goroutine" || s.Reason == "" {
			t.Errorf("sample %+v: want an off-CPU sample of pid %d in state S, of thread \"goroutine\", with a wait reason", s, pid)
		}
		for _, f := range s.Frames {
			if strings.HasPrefix(f.Function, "main.") {
				named++
				break
			}
		}
	}
	if named == 0 {
		t.Errorf("none of %d goroutine samples has a main.* frame", len(prof.Samples))
	}
	if pr := prof.Processes[uint32(pid)]; pr == nil || pr.ExeName == "" {
		t.Errorf("process %+v: want the Go target described", pr)
	}
}

// TestOpenSamplesABusyChild: the pipeline Open builds samples a named
// process on the kernel (the sampler leaves out its own), Start attaches
// it, and Drain hands every sample to the collector, whose profile names
// the process as the tracker read it.
func TestOpenSamplesABusyChild(t *testing.T) {
	testutil.RequireRoot(t, "loading the sampler needs root or CAP_BPF+CAP_PERFMON")
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	pid := uint32(child.Process.Pid)
	cfg := testConfig(t)
	cfg.Frequency = 499
	cfg.PIDs = []int{child.Process.Pid}
	cfg.Budget.RingMiB = 2
	p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if !p.drain(10 * time.Second) {
		t.Fatal("sampler not drained after 10s")
	}
	prof := p.collector.Build(time.Now())
	for _, s := range prof.Samples {
		if s.PID != pid {
			t.Fatalf("sample of pid %d: the filter names only %d", s.PID, pid)
		}
	}
	c, err := p.source.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if len(prof.Samples) == 0 || uint64(len(prof.Samples)) != c["samples"]-lost(c) {
		t.Fatalf("%d samples in the profile, %d taken by the kernel (counters %v)", len(prof.Samples), c["samples"], c)
	}
	if pr := prof.Processes[pid]; pr == nil || !slices.Contains([]string{"dash", "bash", "sh"}, pr.ExeName) {
		t.Errorf("process %+v: want the shell the tracker read", pr)
	}
}

// lost counts the samples the kernel took but the sampler lost.
func lost(c map[string]uint64) uint64 {
	var n uint64
	for k, v := range c {
		if strings.HasPrefix(k, "lost_") {
			n += v
		}
	}
	return n
}
