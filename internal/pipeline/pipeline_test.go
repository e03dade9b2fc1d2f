package pipeline

import (
	"os"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/correlate"
	"github.com/spanprof/spanprof/internal/pipeline/pipelinetest"
	"github.com/spanprof/spanprof/internal/profile"
	"github.com/spanprof/spanprof/internal/sampler"
	"github.com/spanprof/spanprof/internal/symbolize"
)

func newFakeSource() *pipelinetest.Source { return pipelinetest.NewSource(64 + 16) }

// noKernel leaves kernel addresses unsymbolized without reading kallsyms.
type noKernel struct{}

func (noKernel) Frames(dst []profile.Frame, addr uint64) []profile.Frame {
	return append(dst, profile.Frame{Address: addr})
}

// calls records what the correlator was told, in order.
type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(s string) { c.mu.Lock(); c.log = append(c.log, s); c.mu.Unlock() }

func (c *calls) Seen(pid uint32, rescan time.Duration) {
	c.add("seen " + rescan.String())
}
func (c *calls) Exec(uint32)                        { c.add("exec") }
func (c *calls) LinkMap(uint32)                     { c.add("linkmap") }
func (c *calls) Exit(uint32)                        { c.add("exit") }
func (c *calls) Info(uint32) (correlate.Info, bool) { return correlate.Info{ServiceName: "svc"}, true }
func (c *calls) ForgetExited(time.Time)             {}
func (c *calls) got() []string                      { c.mu.Lock(); defer c.mu.Unlock(); return slices.Clone(c.log) }
func testConfig(t *testing.T) Config {
	return Config{Frequency: 99, Symbolization: Symbolization{Mode: symbolize.ModeLocal},
		Budget: Budget{DWARFSpillDir: t.TempDir()}}
}

//go:noinline
func busyFunc() int { return os.Getpid() }

func selfRecord(t time.Time) *sampler.Record {
	pid := uint32(os.Getpid())
	return &sampler.Record{PID: pid, TID: pid, Comm: "pipeline.test", Time: t, Value: 1,
		UserStack: []uint64{uint64(reflect.ValueOf(busyFunc).Pointer()) + 1}}
}

// TestAddAndProcEventReachEveryStage: a sample reaches the collector and
// is noted for the trace-context watcher (with its rescan delay) and the
// JIT perf maps; an exec is rescanned at once, an exit forgotten.
func TestAddAndProcEventReachEveryStage(t *testing.T) {
	corr := &calls{}
	p, err := New(testConfig(t), newFakeSource(), Parts{Kernel: noKernel{}, Correlator: corr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	self := uint32(os.Getpid())
	p.Add(selfRecord(time.Now()))
	p.ProcEvent(sampler.ProcEvent{PID: self + 1, Time: time.Now()})
	p.ProcEvent(sampler.ProcEvent{PID: self + 1, Time: time.Now(), Exit: true})
	want := []string{"seen " + RescanAfter.String(), "exec", "seen 0s", "exit"}
	if got := corr.got(); !slices.Equal(got, want) {
		t.Errorf("correlator told %q, want %q", got, want)
	}
	if n := p.collector.Stats().Samples; n != 1 {
		t.Errorf("collector holds %d samples, want 1", n)
	}
	if got := p.symbols.JIT.Sampled(); !slices.Contains(got, self) {
		t.Errorf("JIT maps sampled %v, want %d among them", got, self)
	}
	prof := p.collector.Build(time.Now())
	if len(prof.Samples) != 1 || len(prof.Samples[0].Frames) == 0 || prof.Samples[0].Frames[0].Function != "github.com/spanprof/spanprof/internal/pipeline.busyFunc" {
		t.Fatalf("profile %+v: want one sample in busyFunc", prof.Samples)
	}
	if pr := prof.Processes[self]; pr == nil || pr.ServiceName != "svc" {
		t.Errorf("process %+v: want the correlator's service name", pr)
	}
}

// TestDrainTakesWhatWasQueued: drain stops the source and hands on every
// sample and event queued before the channel closed.
func TestDrainTakesWhatWasQueued(t *testing.T) {
	src := newFakeSource()
	corr := &calls{}
	p, err := New(testConfig(t), src, Parts{Kernel: noKernel{}, Correlator: corr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 5 {
		src.Sample(selfRecord(time.Now()))
	}
	src.Proc(sampler.ProcEvent{PID: 0x7ffffff0, Time: time.Now(), Exit: true})
	if !p.drain(5 * time.Second) {
		t.Fatal("drain timed out on a closed channel")
	}
	if !src.Stopped.Load() {
		t.Error("drain did not stop the source")
	}
	if n := p.collector.Stats().Samples; n != 5 {
		t.Errorf("collector holds %d samples, want the 5 queued", n)
	}
	if got := corr.got(); !slices.Contains(got, "exit") {
		t.Errorf("correlator told %q: the queued exit was not handed on", got)
	}
}

// TestBudgetBoundsTheSymbolizer: the budget's cache bound is the
// symbolizer's: clang's libLLVM (megabytes of dynamic symbols) and
// libstdc++ do not both stay under a 1 MiB bound, and do under 64 MiB.
// Go binaries cost little: their pclntabs are mapped, not charged.
func TestBudgetBoundsTheSymbolizer(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := goBinary()
	if err != nil {
		t.Skip(err)
	}
	const llvm, stdcxx = "/usr/lib/llvm-19/lib/libLLVM.so.1", "/lib/x86_64-linux-gnu/libstdc++.so.6"
	for _, p := range []string{llvm, stdcxx} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%v (make deps installs clang-19)", err)
		}
	}
	for _, tt := range []struct {
		mib         int
		wantEvicted bool
	}{{1, true}, {64, false}} {
		s, err := NewSymbols(Symbolization{Mode: symbolize.ModeLocal}, Budget{CacheMiB: tt.mib, DWARFSpillDir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{self, goTool} {
			if _, err := s.Symbolizer.Open(path, path); err != nil {
				t.Fatal(err)
			}
		}
		if n := s.Symbolizer.Bytes(); n > 64<<10 {
			t.Errorf("two Go binaries charged %d bytes, want their pclntabs mapped, not counted", n)
		}
		for _, path := range []string{llvm, stdcxx} {
			if _, err := s.Symbolizer.Open(path, path); err != nil {
				t.Fatal(err)
			}
		}
		if ev := s.Symbolizer.Stats().Evicted; (ev > 0) != tt.wantEvicted {
			t.Errorf("cache of %d MiB: %d objects evicted, want evictions %v", tt.mib, ev, tt.wantEvicted)
		}
	}
}
