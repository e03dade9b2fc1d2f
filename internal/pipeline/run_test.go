package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spanprof/spanprof/internal/sampler"
)

// TestRunTicksStopsAndDrains: Run hands the queued samples on, calls Tick
// between events until it says stop, calls Stopping once, and then
// drains what was queued after it, so Build sees every sample.
func TestRunTicksStopsAndDrains(t *testing.T) {
	src := newFakeSource()
	p, err := New(testConfig(t), src, Parts{Kernel: noKernel{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		src.Sample(selfRecord(time.Now()))
	}
	ticks, stops := 0, 0
	var handledAtStop uint64
	err = p.Run(context.Background(), Hooks{
		Every: 5 * time.Millisecond,
		Tick: func() bool {
			ticks++
			return p.Handled() < 3
		},
		Stopping: func() {
			stops++
			handledAtStop = p.Handled()
			// Read by the kernel before the programs are detached: the
			// drain takes them.
			src.Sample(selfRecord(time.Now()))
			src.Proc(sampler.ProcEvent{PID: 0x7ffffff0, Time: time.Now(), Exit: true})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ticks == 0 || stops != 1 || handledAtStop != 3 {
		t.Errorf("%d ticks, %d stops, %d samples handled at the stop; want ticks, one stop, 3", ticks, stops, handledAtStop)
	}
	if !src.Stopped.Load() {
		t.Error("the source was not stopped")
	}
	if st := p.Stats(); st.Handled != 4 || st.Collector.Samples != 4 {
		t.Errorf("handled %d, collected %d; want the 4 samples, the one after the stop included", st.Handled, st.Collector.Samples)
	}
	if prof := p.Build(time.Now()); len(prof.Samples) != 4 {
		t.Errorf("built %d samples, want 4", len(prof.Samples))
	}
}

// TestRunEndsWithTheSource: with EndWithSource, the loop ends when the
// source closes; without it, it goes on until the context ends.
func TestRunEndsWithTheSource(t *testing.T) {
	for _, end := range []bool{true, false} {
		src := newFakeSource()
		p, err := New(testConfig(t), src, Parts{Kernel: noKernel{}})
		if err != nil {
			t.Fatal(err)
		}
		src.Sample(selfRecord(time.Now()))
		src.Stop() // the reader ended
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t0 := time.Now()
		if err := p.Run(ctx, Hooks{EndWithSource: end}); err != nil {
			t.Fatal(err)
		}
		took, ended := time.Since(t0), ctx.Err()
		cancel()
		if end && ended != nil {
			t.Errorf("EndWithSource: the loop ran until the context ended (%v)", took)
		}
		if !end && ended == nil {
			t.Errorf("without EndWithSource: the loop ended with the source, before the context (%v)", took)
		}
		if n := p.Handled(); n != 1 {
			t.Errorf("EndWithSource %v: %d samples handled, want 1", end, n)
		}
		p.Close()
	}
}

// TestExecutableFilter: with Config.Executables, the samples of other
// processes are dropped and counted, and those of the named executable
// and of the named pids kept.
func TestExecutableFilter(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Executables = []string{filepath.Base(exe)}
	cfg.PIDs = []int{0x7ffffff2}
	p, err := New(cfg, newFakeSource(), Parts{Kernel: noKernel{}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		p.Handle(sampler.Event{Sample: selfRecord(time.Now())})
		other := selfRecord(time.Now())
		other.PID, other.TID = 0x7ffffff1, 0x7ffffff1 // no such process
		p.Handle(sampler.Event{Sample: other})
	}
	named := selfRecord(time.Now())
	named.PID, named.TID = 0x7ffffff2, 0x7ffffff2
	p.Handle(sampler.Event{Sample: named})
	if st := p.Stats(); st.Filtered != 3 || st.Handled != 4 || st.Collector.Samples != 4 {
		t.Errorf("filtered %d, handled %d, collected %d; want 3, 4, 4", st.Filtered, st.Handled, st.Collector.Samples)
	}
}

// TestValidate: each range is checked, and the error names the field as
// the command renames it, on one line.
func TestValidate(t *testing.T) {
	good := func() Config {
		return Config{Frequency: 99, GoWaitFrequency: 10, OffCPU: OffCPUOptions{Threshold: DefaultOffCPUThreshold},
			Budget: Budget{CacheMiB: 32, RingMiB: 4, GCPercent: 50}}
	}
	names := map[Field]string{FieldRingMiB: "--ring-mib", FieldFrequency: "--frequency"}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"frequency", func(c *Config) { c.Frequency = 0 }, "--frequency 0 out of range 1..100000"},
		{"ring", func(c *Config) { c.Budget.RingMiB = 3 }, "--ring-mib 3: want a power of two from 2 to 1024"},
		{"ring too large", func(c *Config) { c.Budget.RingMiB = 2048 }, "--ring-mib 2048: want a power of two from 2 to 1024"},
		{"cache", func(c *Config) { c.Budget.CacheMiB = 0 }, "cache_mib 0: want at least 1"},
		{"gc percent", func(c *Config) { c.Budget.GCPercent = 5 }, "gc_percent 5 out of range 10..1000"},
		{"limit", func(c *Config) { c.Budget.LimitMiB = -1 }, "limit_mib -1 is negative"},
		{"go wait", func(c *Config) { c.GoWaitFrequency = 1001 }, "go_wait_frequency 1001 out of range 0..1000"},
		{"threshold", func(c *Config) { c.OffCPU.Threshold = 0 }, "off_cpu_threshold 0s out of range 1ns..4.294967295s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.change(&c)
			err := Rename(c.Validate(), names)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Validate: %v, want %q", err, tt.want)
			}
		})
	}
}
