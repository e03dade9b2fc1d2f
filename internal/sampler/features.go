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
// exists, the probe itself, and, for a feature with a fallback, what
// degrades without it.
type feature struct {
	what, since string
	probe       func() error
	without     string
	// compat: without it, the sampler loads the compat object
	// (bpf/lib/compat.h) in place of the default one.
	compat bool
}

// requiredFeatures are the sampler's needs that have no fallback.
var requiredFeatures = []feature{
	{what: "BPF ring buffers", since: "5.8", probe: func() error { return features.HaveMapType(ebpf.RingBuf) }},
	{what: "tp_btf programs (BPF trampolines)", since: "5.5", probe: func() error {
		return features.HaveProgramType(ebpf.Tracing)
	}},
}

// optionalFeatures fall back where they are used; each one missing is
// said in one line at start (Degradations). The VMA iterator (6.7) is
// probed by loading its object (loadExitMaps), tracefs at its attach.
var optionalFeatures = []feature{
	{what: "BPF task storage", since: "5.11", compat: true,
		probe: func() error { return features.HaveMapType(ebpf.TaskStorage) },
		without: "per-thread state is kept in hash maps by thread id (off-CPU cycles of at most 65536 threads, " +
			"span contexts set through spanprof_set_trace_context of at most 16384), a full map counted as task_hash_full; " +
			"the pinned task_trace_context is such a hash, which programs written for task storage cannot fill"},
	{what: "bpf_get_current_task_btf", since: "5.11", compat: true,
		probe:   func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnGetCurrentTaskBtf) },
		without: "the current task's fields are read with probe reads (more eBPF time per sample)"},
	{what: "bpf_task_pt_regs", since: "5.15", compat: true,
		probe:   func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnTaskPtRegs) },
		without: "user registers of a tick in kernel mode and of an off-CPU wait are copied from the top of the task's kernel stack"},
	// Perf-event links came with BPF cookies (5.15); the cookie helper is
	// the probe, the attach itself falls back whatever it says.
	{what: "perf-event BPF links", since: "5.15",
		probe:   func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnGetAttachCookie) },
		without: "the on-CPU program is attached by PERF_EVENT_IOC_SET_BPF"},
	{what: "bpf_ktime_get_tai_ns", since: "6.1",
		probe: func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnKtimeGetTaiNs) },
		without: "samples are stamped with the monotonic clock and converted to wall-clock time with an offset " +
			"measured at most a second before: a step of the wall clock (time sync) reaches the stamps up to a second late"},
	{what: "bpf_find_vma", since: "5.17",
		probe:   func() error { return features.HaveProgramHelper(ebpf.PerfEvent, asm.FnFindVma) },
		without: "the dynamic loader of a new process is placed by its path only (a container's loader of the host's path is not told apart)"},
}

// kernelFeatures is what the probes found: whether the compat object is
// needed, and one line per missing optional feature.
type kernelFeatures struct {
	compat   bool
	degraded []string
}

// checkFeatures probes the kernel and returns a one-line error naming the
// first missing required feature, so a user meets that instead of a
// verifier dump, or what is missing of the rest. A probe that cannot tell
// (another error) is left to the load to report.
func checkFeatures() (kernelFeatures, error) {
	var kf kernelFeatures
	for _, f := range requiredFeatures {
		if err := f.probe(); errors.Is(err, ebpf.ErrNotSupported) {
			return kf, fmt.Errorf("%w: %s (Linux %s)", ErrKernelFeature, f.what, f.since)
		}
	}
	for _, f := range optionalFeatures {
		if err := f.probe(); errors.Is(err, ebpf.ErrNotSupported) {
			kf.compat = kf.compat || f.compat
			kf.degraded = append(kf.degraded, fmt.Sprintf("kernel lacks %s (Linux %s): %s", f.what, f.since, f.without))
		}
	}
	return kf, nil
}
