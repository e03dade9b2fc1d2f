package sampler

import (
	"errors"
	"fmt"
	"reflect"
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
	// RawTracepoint loads the raw-tracepoint program instead of the
	// tp_btf one (which New falls back to where tp_btf does not load).
	RawTracepoint bool
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

// attachOffCPU attaches the sched_switch program New loaded: tp_btf, or
// the raw tracepoint where tp_btf did not load (loadSampler). Neither
// needs tracefs.
func (s *Sampler) attachOffCPU() error {
	var l link.Link
	var err error
	if p := s.objs.SchedSwitchBtf; p != nil {
		l, err = link.AttachTracing(link.TracingOptions{Program: p})
		if err != nil {
			return fmt.Errorf("attach off-CPU program to tp_btf/sched_switch: %w (off-CPU sampling needs it)", err)
		}
	} else {
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_switch", Program: s.objs.SchedSwitchRaw})
		if err != nil {
			return fmt.Errorf("attach off-CPU program to raw tracepoint sched_switch: %w (off-CPU sampling needs it)", err)
		}
	}
	s.mu.Lock()
	s.links = append(s.links, l)
	s.mu.Unlock()
	return nil
}

// switchPrograms are the sched_switch programs, one of which off-CPU
// sampling attaches.
var switchPrograms = []string{bpf.SamplerProgSchedSwitchBtf, bpf.SamplerProgSchedSwitchRaw}

// loadSampler loads spec's maps and variables into objs, and the
// programs of bpf.SamplerPrograms that this sampler attaches: the
// sched_switch program only with off-CPU sampling, and of its two
// variants only the one off chooses. Each costs the verifier as much as
// the on-CPU program (bpf/verified-insns.txt), and loading both, whatever
// the options, was most of the agent's start-up CPU: a second of kernel
// time before the first sample. The programs left out stay nil.
func loadSampler(spec *ebpf.CollectionSpec, objs *bpf.SamplerObjects, off OffCPUOptions, opts *ebpf.CollectionOptions) error {
	skip := map[string]bool{}
	switch {
	case !off.Enabled:
		skip[switchPrograms[0]], skip[switchPrograms[1]] = true, true
	case off.RawTracepoint:
		skip[switchPrograms[0]] = true
	default:
		skip[switchPrograms[1]] = true
	}
	progs := reflect.ValueOf(&objs.SamplerPrograms).Elem()
	var fields []reflect.StructField
	var index []int
	for i := range progs.NumField() {
		f := progs.Type().Field(i)
		if !skip[f.Tag.Get("ebpf")] {
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag})
			index = append(index, i)
		}
	}
	// LoadAndAssign loads what the struct it fills names, following
	// pointers to structs: the maps, the variables and the chosen
	// programs.
	chosen := reflect.New(reflect.StructOf(fields))
	maps, vars := reflect.ValueOf(&objs.SamplerMaps), reflect.ValueOf(&objs.SamplerVariables)
	target := reflect.New(reflect.StructOf([]reflect.StructField{
		{Name: "Maps", Type: maps.Type()},
		{Name: "Variables", Type: vars.Type()},
		{Name: "Programs", Type: chosen.Type()},
	})).Elem()
	target.Field(0).Set(maps)
	target.Field(1).Set(vars)
	target.Field(2).Set(chosen)
	if err := spec.LoadAndAssign(target.Addr().Interface(), opts); err != nil {
		return err
	}
	for k, i := range index {
		progs.Field(i).Set(chosen.Elem().Field(k))
	}
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
