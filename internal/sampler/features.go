package sampler

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
)

// ErrKernelFeature is returned when the kernel lacks a BPF feature the
// sampler cannot do without.
var ErrKernelFeature = errors.New("kernel lacks a BPF feature spanprof needs")

// feature is one probe: what is missing, from which Linux version on it
// exists, and the probe itself.
type feature struct {
	what, since string
	probe       func() error
}

// requiredFeatures are the sampler's needs that have no fallback. The
// optional ones fall back where they are used: bpf_find_vma (5.17; the
// loader's file is then placed by path only), the VMA iterator (6.7; see
// loadExitMaps), perf-event links (5.15; ioctl attach), tracefs for
// sys_enter_exit_group.
var requiredFeatures = []feature{
	{"BPF ring buffers", "5.8", func() error { return features.HaveMapType(ebpf.RingBuf) }},
	{"BPF task storage", "5.11", func() error { return features.HaveMapType(ebpf.TaskStorage) }},
	{"bpf_get_current_task_btf in perf_event programs", "5.11", func() error {
		return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnGetCurrentTaskBtf)
	}},
	{"bpf_task_pt_regs", "5.15", func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnTaskPtRegs) }},
}

// checkFeatures probes the kernel and returns a one-line error naming the
// first missing feature, so a user meets that instead of a verifier dump.
// A probe that cannot tell (another error) is left to the load to report.
func checkFeatures() error {
	for _, f := range requiredFeatures {
		if err := f.probe(); errors.Is(err, ebpf.ErrNotSupported) {
			return fmt.Errorf("%w: %s (Linux %s)", ErrKernelFeature, f.what, f.since)
		}
	}
	return nil
}
