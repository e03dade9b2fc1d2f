package collect

import (
	"strings"

	"github.com/spanprof/spanprof/internal/profile"
)

// Off-CPU stacks are captured inside the sched_switch tracepoint, so their
// leaf kernel frames are the tracing machinery and the scheduler itself.
// The tracing frames are spanprof's own and are cut; the scheduler frames
// stay (they show that the thread blocked) but are skipped when naming the
// reason. Mainline kernels have no sched_blocked_reason tracepoint, so the
// reason is derived here: the first kernel function below the scheduler,
// the one that decided to wait (do_nanosleep, futex_wait_queue or
// futex_do_wait, pipe_read, ep_poll, wait_woken, folio_wait_bit_common...).

// tracingPrefixes name the frames of the tracepoint and BPF program.
var tracingPrefixes = []string{"bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_", "bpf_trampoline_", "trace_call_bpf"}

// schedulerNames are the generic ways into the scheduler: they say that a
// thread waits, not why.
var schedulerNames = map[string]bool{
	"__schedule": true, "schedule": true, "schedule_idle": true,
	"_cond_resched": true, "__cond_resched": true,
	"do_syscall_64": true, "x64_sys_call": true,
	"rt_mutex_schedule": true, "freezable_schedule": true,
}

// schedulerPrefixes cover the families of schedule helpers (timeouts,
// hrtimeouts, io_schedule, preemption) and the syscall entry path.
var schedulerPrefixes = []string{
	"schedule_", "__schedule_", "io_schedule", "preempt_schedule",
	"__x64_sys_", "__ia32_sys_", "__do_sys_", "__se_sys_", "entry_SYSCALL",
}

// baseName drops the suffixes the compiler gives kernel clones
// (".part.0", ".constprop.0", ".isra.0", ".cold"), so that one wait
// function is one reason on every build.
func baseName(fn string) string {
	if i := strings.IndexByte(fn, '.'); i > 0 {
		return fn[:i]
	}
	return fn
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// trimTracing drops the leading kernel frames of the tracepoint and the BPF
// program that captured an off-CPU stack.
func trimTracing(frames []profile.Frame) []profile.Frame {
	n := 0
	for n < len(frames) && frames[n].Mapping != nil && frames[n].Mapping.Kernel &&
		hasAnyPrefix(frames[n].Function, tracingPrefixes) {
		n++
	}
	return frames[n:]
}

// WaitReason names why an off-CPU stack (leaf first) waited: the first
// kernel function that is neither tracing nor a generic scheduler entry,
// without compiler clone suffixes. It is empty when the stack has no such
// kernel frame (kernel stack unreadable or unsymbolized).
func WaitReason(frames []profile.Frame) string {
	for _, f := range frames {
		if f.Mapping == nil || !f.Mapping.Kernel {
			break
		}
		fn := baseName(f.Function)
		if fn == "" {
			return ""
		}
		if schedulerNames[fn] || hasAnyPrefix(fn, schedulerPrefixes) || hasAnyPrefix(fn, tracingPrefixes) {
			continue
		}
		return fn
	}
	return ""
}
