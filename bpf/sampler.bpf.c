//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* On-CPU sampler: runs on every tick of the software CPU clock, copies the
 * user and kernel stacks (frame-pointer walk done by the kernel), the user
 * registers and the top of the user stack for the leaf fix-up, and the
 * trace context the thread runs in, into a ring buffer record. The off-CPU
 * sampler on sched_switch (lib/offcpu.h) fills the same record. This file
 * holds the programs; what they share is in lib/. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"
#include "lib/stackwalk.h"
#include "lib/procevents.h"
#include "lib/offcpu.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("perf_event")
int sample_on_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct user_ctx u = {};
	struct task_struct *task;
	struct stack_sample *s;
	__u32 zero = 0;
	__u64 size, mode;

	if (!wanted(tgid))
		return 0;

	s = bpf_map_lookup_elem(&sample_scratch, &zero);
	if (!s)
		return 0;
	task = CURRENT_TASK();

	fill_sample(s, task, pid_tgid, SAMPLE_ON_CPU, 0, 1);
	mode = CTX_MODE(ctx);
	if (MODE_IS_USER(mode)) {
		/* The tick interrupted user code: its registers are here. */
		SET_USER_REGS(s, &ctx->regs);
		u.mode = mode;
		fill_user(s, &u, 0);
	} else if (task_user_regs(s, task, &u)) {
		fill_user(s, &u, 0);
	}
	size = fill_stacks(ctx, s, &u, !MODE_IS_USER(mode));
	if (bpf_ringbuf_output(&samples, s, size, wakeup_flags())) {
		count(CNT_RINGBUF_FULL);
		return 0;
	}
	count(CNT_SAMPLES);
	return 0;
}

/* Writer for binaries exporting
 *   void spanprof_set_trace_context(const uint8_t *trace_id16, const uint8_t *span_id8)
 * (SPEC source 3): fills the calling thread's task storage; NULL clears. */
SEC("uprobe")
int BPF_KPROBE(set_trace_context, const __u8 *trace_id, const __u8 *span_id)
{
	struct trace_context *tc;
	__u8 tid[16], sid[8];

	if (!trace_id) {
		/* Clear in place: an update of the task's own entry cannot
		 * fail, where a delete can (-EBUSY) and leave a stale span. */
		tc = TASK_GET(&task_trace_context, CURRENT_TASK(), (__u32)bpf_get_current_pid_tgid(), 0);
		if (tc)
			__builtin_memset(tc, 0, sizeof(*tc));
		return 0;
	}
	if (bpf_probe_read_user(tid, sizeof(tid), trace_id) ||
	    bpf_probe_read_user(sid, sizeof(sid), span_id)) {
		count(CNT_CTX_READ_ERR);
		__builtin_memset(tid, 0, sizeof(tid)); /* never keep the old span */
		__builtin_memset(sid, 0, sizeof(sid));
	}
	tc = TASK_GET(&task_trace_context, CURRENT_TASK(), (__u32)bpf_get_current_pid_tgid(), 1);
	if (!tc)
		return 0;
	__builtin_memcpy(tc->trace_id, tid, sizeof(tid));
	__builtin_memcpy(tc->span_id, sid, sizeof(sid));
	tc->start_ktime_ns = bpf_ktime_get_ns();
	return 0;
}
/* tp_btf needs no tracefs mount and gives typed arguments. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct proc_lifecycle *e;
	struct mm_struct *mm;
	struct file *file;
	long n;

	if (!wanted(tgid))
		return 0;
	e = proc_event_reserve(tgid, PROC_EXEC);
	if (!e)
		return 0;
	mm = p->mm;
	e->exec_mm = (__u32)(__u64)mm;
	/* The auxiliary vector the new image starts with: its pairs end at
	 * AT_NULL. */
	if (mm) {
		/* The array's length is each kernel's AT_VECTOR_SIZE, and a
		 * direct load past its end is refused by the verifiers of 6.1
		 * and 6.12 (it lands in the next field's type); probe reads
		 * bounded by the field's size as this kernel has it are not.
		 * Once per exec: the cost of the reads does not matter. */
		__u32 pairs = bpf_core_field_size(mm->saved_auxv) / 16;
		__u64 *auxv = (__u64 *)__builtin_preserve_access_index(&mm->saved_auxv);

		for (int i = 0; i < AUXV_MAX_PAIRS && i < pairs; i++) {
			__u64 kv[2];

			if (bpf_probe_read_kernel(kv, sizeof(kv), auxv + 2 * i) || kv[0] == 0)
				break;
			if (kv[0] == AT_BASE_)
				e->interp_base = kv[1];
			else if (kv[0] == AT_ENTRY_)
				e->entry = kv[1];
		}
	}
	file = bprm->file;
	if (file) {
		e->exe_ino = file->f_inode->i_ino;
		e->exe_dev = file->f_inode->i_sb->s_dev;
	}
	/* Which file the loader is, so user space never places another one
	 * of the same path (a container's against the host's). */
#ifndef SPANPROF_COMPAT
	if (e->interp_base && bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_find_vma)) {
		struct file_id id = {};

		bpf_find_vma(p, e->interp_base, interp_file, &id, 0);
		e->interp_ino = id.ino;
		e->interp_dev = id.dev;
	}
#endif
	n = bpf_probe_read_kernel_str(e->path, sizeof(e->path), bprm->interp);
	e->path_len = n > 0 ? n : 0;
	proc_event_submit(e);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct proc_lifecycle *e;

#ifdef SPANPROF_COMPAT
	/* The per-thread hashes stand in for task storage, which the kernel
	 * frees with the task. */
	__u32 thread = (__u32)pid_tgid;

	bpf_map_delete_elem(&task_trace_context, &thread);
	bpf_map_delete_elem(&offcpu_threads, &thread);
#endif
	/* Only the whole process going away matters for mappings. */
	if ((__u32)pid_tgid != tgid || !wanted(tgid))
		return 0;
	e = proc_event_reserve(tgid, PROC_EXIT);
	if (e)
		proc_event_submit(e);
	return 0;
}

/* A new process, so that user space knows the pid is another process's now
 * (it may be an exited one's) and that its image is its parent's until it
 * execs: without the event, a fork that never execs would be told from the
 * pid's earlier process only by reading /proc. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 tgid = child->tgid;
	struct proc_lifecycle *e;

	if (child->pid != tgid || !wanted(tgid))
		return 0;
	e = proc_event_reserve(tgid, PROC_FORK);
	if (!e)
		return 0;
	e->parent = parent->tgid;
	proc_event_submit(e);
	return 0;
}

/* The dynamic loader's debugger hook, _dl_debug_state (glibc's ld.so,
 * musl's libc.so), which it calls as the link map changes: a library
 * loaded or unloaded after start-up (dlopen, dlclose; at start-up too).
 * Attached per loader file, so one attach covers every process of that
 * loader. User space rescans the process for a context source it may
 * have loaded. An event of the ring like an exec, in order with the
 * samples around it; it waits for the next poll. */
SEC("uprobe")
int on_link_map(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct proc_lifecycle *e;

	if (!wanted(tgid))
		return 0;
	e = proc_event_reserve(tgid, PROC_LINKMAP);
	if (e)
		proc_event_submit(e);
	return 0;
}

/* tp_btf needs no tracefs and gives typed arguments; next is trusted, so
 * its task storage says whether a capture is pending without touching the
 * hash map. */
SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	/* prev is current; the compat object takes it from the argument
	 * (no bpf_get_current_task_btf before 5.11). */
#ifdef SPANPROF_COMPAT
	struct task_struct *task = prev;
#else
	struct task_struct *task = bpf_get_current_task_btf();
#endif
	struct offcpu_thread *st;
	__u64 now = offcpu_clock(task);

	if (now)
		offcpu_switch_out(ctx, task, preempt, now);
	st = TASK_GET(&offcpu_threads, next, next->pid, 0);
	if (st && st->pending) {
		st->pending = 0;
		offcpu_emit(next->pid);
	}
	return 0;
}

/* Fallback for kernels that cannot attach tp_btf to sched_switch: next is
 * untrusted there, so it is read with a probe read and looked up by tid. */
SEC("raw_tp/sched_switch")
int BPF_PROG(sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct task_struct *task = CURRENT_TASK();
	__u64 now = offcpu_clock(task);
	__u32 tid;

	if (now)
		offcpu_switch_out(ctx, task, preempt, now);
	tid = BPF_CORE_READ(next, pid);
	if (tid)
		offcpu_emit(tid);
	return 0;
}

/* Referenced so the enums reach BTF and bpf2go can emit them for Go. */
const enum sample_kind *unused_sample_kind __attribute__((unused));
const enum sample_flag *unused_sample_flag __attribute__((unused));
const enum ctx_source *unused_ctx_source __attribute__((unused));
const enum drop_counter *unused_drop_counter __attribute__((unused));
const enum proc_event_kind *unused_proc_event_kind __attribute__((unused));
const enum tls_kind *unused_tls_kind __attribute__((unused));
const enum go_label_layout *unused_go_label_layout __attribute__((unused));
const struct proc_lifecycle *unused_proc_lifecycle __attribute__((unused));
const enum record_tag *unused_record_tag __attribute__((unused));
const struct stack_sample *unused_stack_sample __attribute__((unused));
