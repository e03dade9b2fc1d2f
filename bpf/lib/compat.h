/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the sampler does without the helpers and maps of Linux 5.11 to
 * 5.15, for the compat object (SamplerCompat in gen.go: sampler.bpf.c
 * built with -DSPANPROF_COMPAT), which internal/sampler loads where the
 * kernel lacks them (Linux 5.10). The default object is built without the
 * define and is unchanged by this header: each macro is there what the
 * code did before.
 *
 * Linux 5.10 lacks, and the compat object does instead:
 * - bpf_get_current_task_btf (5.11): bpf_get_current_task, an untrusted
 *   pointer whose fields are read with probe reads (TREAD) where the
 *   default object loads them directly;
 * - bpf_task_pt_regs (5.15): the task's user registers are the pt_regs at
 *   the top of its kernel stack (task->stack + THREAD_SIZE), as the
 *   kernel's own task_pt_regs finds them on x86-64 and arm64, copied with
 *   a probe read into a per-CPU scratch;
 * - task storage in tracing programs (5.11): per-thread hash maps keyed by
 *   thread id, whose entries on_exit deletes when the thread exits; a
 *   thread that finds its map full is counted (CNT_TASK_HASH_FULL);
 * - bpf_find_vma (5.17) and its callback (BPF_PSEUDO_FUNC, 5.13), which
 *   5.10's loader refuses even in dead code: compiled out;
 * - global functions taking pointers (5.12; 5.10: "Arg#0 type PTR in
 *   walk_user() is not supported yet"): the kernel walks the user stack
 *   (bpf_get_stack), see fill_stacks in stackwalk.h.
 * - preallocation is not optional for hashes a perf_event program uses
 *   ("perf_event programs can only use preallocated hash map"): see
 *   task_trace_context in maps.h. */
#ifndef SPANPROF_LIB_COMPAT_H
#define SPANPROF_LIB_COMPAT_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#ifdef SPANPROF_COMPAT

/* Threads with an entry in a per-thread hash at once: off-CPU state, and
 * span contexts set by uprobe (task_trace_context, preallocated). */
#define TASK_HASH_ENTRIES 65536
#define TASK_CTX_ENTRIES 16384

/* Kernel stacks are 16 KiB on x86-64 and arm64 (4 KiB pages, no KASAN,
 * as Debian's kernels are built), and the user registers end them:
 * TOP_OF_KERNEL_STACK_PADDING is 0 on x86-64. */
#define COMPAT_THREAD_SIZE (4096 << 2)

#define CURRENT_TASK() ((struct task_struct *)bpf_get_current_task())
#define TREAD(p, f) BPF_CORE_READ(p, f)
/* No CLOCK_TAI before 6.1: user space converts CLOCK_MONOTONIC. */
#define KTIME_TAI() 0

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pt_regs);
} compat_regs SEC(".maps");

/* compat_task_pt_regs returns a copy of task's saved user registers, or
 * NULL when they cannot be read. */
static __always_inline struct pt_regs *compat_task_pt_regs(struct task_struct *task)
{
	__u32 zero = 0;
	struct pt_regs *r = bpf_map_lookup_elem(&compat_regs, &zero);
	void *stack = BPF_CORE_READ(task, stack);

	if (!r || !stack)
		return 0;
	if (bpf_probe_read_kernel(r, sizeof(*r), stack + COMPAT_THREAD_SIZE - sizeof(*r)))
		return 0;
	return r;
}
#define TASK_PT_REGS(task) compat_task_pt_regs(task)

/* Before 5.14 the task's state field was "state", a long. */
struct task_struct___state_long {
	long state;
} __attribute__((preserve_access_index));

static __always_inline unsigned int task_state(struct task_struct *task)
{
	if (bpf_core_field_exists(task->__state))
		return BPF_CORE_READ(task, __state);
	return BPF_CORE_READ((struct task_struct___state_long *)task, state);
}

#else

#define CURRENT_TASK() bpf_get_current_task_btf()
#define TREAD(p, f) ((p)->f)
/* CLOCK_TAI where the kernel has the helper (6.1); 0 before, which user
 * space reads as "convert ktime_ns". Privileged loads drop the dead call
 * on kernels without it, as for bpf_find_vma. */
#define KTIME_TAI()                                                                                \
	(bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_ktime_get_tai_ns) ? bpf_ktime_get_tai_ns() : 0)
#define TASK_PT_REGS(task) ((struct pt_regs *)bpf_task_pt_regs(task))

static __always_inline unsigned int task_state(struct task_struct *task)
{
	return task->__state;
}

#endif

#endif
