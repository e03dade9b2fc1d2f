package sampler

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/spanprof/spanprof/bpf"
)

// DefaultOffCPUThreshold is the default sampling threshold of off-CPU
// waits. A thread is captured at most about once per threshold, and threads
// that switch out less often than that are recorded exactly. At 2 ms the
// captures of a switch-heavy thread (pipe ping-pong, ~30 µs per cycle) add
// about 1.5 % of a full capture per switch, keeping the total well under a
// tenth of offcputime's (bench/offcpu.sh), while every wait of a thread
// that sleeps for milliseconds is kept.
const DefaultOffCPUThreshold = 2 * time.Millisecond

// MaxOffCPUThreshold bounds the threshold so that the kernel's integer
// coin (random u32 times threshold) cannot overflow 64 bits.
const MaxOffCPUThreshold = time.Duration(1<<32 - 1)

// OffCPUOptions configure off-CPU sampling on sched_switch.
type OffCPUOptions struct {
	// Enabled attaches the sched_switch program.
	Enabled bool
	// Threshold is T in q = min(1, cycle/T), where cycle is the time since
	// the thread's previous blocking switch-out; each captured wait is
	// emitted with value blocked/q so that totals stay unbiased (see
	// bpf/lib/offcpu.h). Zero means DefaultOffCPUThreshold; 1ns records every
	// wait.
	Threshold time.Duration
}

func (o *OffCPUOptions) validate() error {
	if o.Threshold == 0 {
		o.Threshold = DefaultOffCPUThreshold
	}
	if o.Threshold < 0 || o.Threshold > MaxOffCPUThreshold {
		return fmt.Errorf("off-CPU threshold %v out of range 1ns..%v", o.Threshold, MaxOffCPUThreshold)
	}
	return nil
}

// setOffCPUSpec writes the threshold into the program before load.
func setOffCPUSpec(spec *ebpf.CollectionSpec, o OffCPUOptions) error {
	if err := spec.Variables[bpf.SamplerVarOffcpuThresholdNs].Set(uint64(o.Threshold)); err != nil {
		return fmt.Errorf("set offcpu_threshold_ns: %w", err)
	}
	return nil
}

// attachOffCPU attaches the sched_switch program: tp_btf where the kernel
// can, the raw tracepoint otherwise. Neither needs tracefs.
func (s *Sampler) attachOffCPU() error {
	l, err := link.AttachTracing(link.TracingOptions{Program: s.objs.SchedSwitchBtf})
	if err != nil {
		var err2 error
		l, err2 = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: s.objs.SchedSwitchRaw})
		if err2 != nil {
			return fmt.Errorf("attach off-CPU program to sched_switch: %w (tp_btf: %v)", err2, err)
		}
		s.log.Info("off-CPU: tp_btf/sched_switch unavailable, using the raw tracepoint", "error", err)
	}
	s.mu.Lock()
	s.links = append(s.links, l)
	s.mu.Unlock()
	return nil
}

// OffCPUPending counts captured waits that have not ended yet: threads
// still blocked, whose record comes when they run again.
func (s *Sampler) OffCPUPending() (int, error) {
	var (
		n    int
		key  uint32
		iter = s.objs.OffcpuPending.Iterate()
		val  bpf.SamplerOffcpuPending
	)
	for iter.Next(&key, &val) {
		n++
	}
	if err := iter.Err(); err != nil && !errors.Is(err, ebpf.ErrIterationAborted) {
		return n, fmt.Errorf("iterate offcpu_pending: %w", err)
	}
	return n, nil
}
