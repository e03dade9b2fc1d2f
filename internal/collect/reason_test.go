package collect

import (
	"reflect"
	"testing"

	"github.com/spanprof/spanprof/internal/profile"
)

var (
	kernelMap = &profile.Mapping{Path: "[kernel.kallsyms]", Kernel: true}
	userMap   = &profile.Mapping{Path: "/usr/bin/app"}
)

// stack builds a leaf-first stack: kernel names, then "|", then user names.
func stack(names ...string) []profile.Frame {
	var out []profile.Frame
	m := kernelMap
	for _, n := range names {
		if n == "|" {
			m = userMap
			continue
		}
		out = append(out, profile.Frame{Function: n, Mapping: m})
	}
	return out
}

func TestWaitReason(t *testing.T) {
	tests := []struct {
		name   string
		frames []profile.Frame
		want   string
	}{
		{"nanosleep", stack("__schedule", "schedule", "do_nanosleep", "hrtimer_nanosleep", "__x64_sys_clock_nanosleep", "do_syscall_64", "entry_SYSCALL_64_after_hwframe", "|", "clock_nanosleep", "main"), "do_nanosleep"},
		{"futex 6.18", stack("bpf_prog_942f8f7d3f9e9ea4_sched_switch_btf", "bpf_trace_run4", "__schedule", "schedule", "futex_do_wait", "__futex_wait", "futex_wait", "do_futex", "__x64_sys_futex", "|", "syscall"), "futex_do_wait"},
		{"futex 6.1 with timeout", stack("__traceiter_sched_switch", "__schedule", "schedule", "futex_wait_queue", "futex_wait", "do_futex"), "futex_wait_queue"},
		{"pipe read", stack("__schedule", "schedule", "pipe_read", "vfs_read", "ksys_read"), "pipe_read"},
		{"epoll clone suffix", stack("__schedule", "schedule", "schedule_hrtimeout_range_clock", "do_epoll_wait", "do_epoll_pwait.part.0"), "do_epoll_wait"},
		{"socket", stack("__schedule", "schedule", "schedule_timeout", "wait_woken", "sk_wait_data", "tcp_recvmsg_locked"), "wait_woken"},
		{"page cache io", stack("__schedule", "schedule", "io_schedule", "folio_wait_bit_common", "filemap_fault"), "folio_wait_bit_common"},
		{"mutex constprop", stack("__schedule", "schedule", "schedule_preempt_disabled", "__mutex_lock.constprop.0", "pipe_write"), "__mutex_lock"},
		{"unsymbolized kernel frame", stack("__schedule", "schedule", "", "vfs_read"), ""},
		{"scheduler only", stack("__schedule", "schedule", "|", "main"), ""},
		{"no kernel stack", stack("|", "read", "main"), ""},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WaitReason(tt.frames); got != tt.want {
				t.Errorf("WaitReason = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTrimTracing(t *testing.T) {
	tests := []struct {
		name string
		in   []profile.Frame
		want []profile.Frame
	}{
		{"tp_btf", stack("bpf_prog_1_sched_switch_btf", "bpf_trace_run4", "__schedule", "schedule", "do_nanosleep"), stack("__schedule", "schedule", "do_nanosleep")},
		{"raw_tp", stack("bpf_prog_2_sched_switch_raw", "__bpf_trace_sched_switch", "__traceiter_sched_switch", "__schedule"), stack("__schedule")},
		{"nothing to trim", stack("__schedule", "schedule"), stack("__schedule", "schedule")},
		{"user frames kept", stack("|", "bpf_prog_lookalike", "main"), stack("|", "bpf_prog_lookalike", "main")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := trimTracing(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("trimTracing = %v, want %v", got, tt.want)
			}
		})
	}
}
