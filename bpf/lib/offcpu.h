/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Off-CPU sampling on sched_switch: where a thread waits (its kernel and
 * user stacks and trace context, captured when it switches out), for how
 * long (emitted when it switches back in), and in which state (S or D).
 *
 * Why sample, and how the estimate stays unbiased
 * -----------------------------------------------
 * Copying two stacks on every context switch is what libbpf-tools offcputime
 * does and costs several microseconds per switch. The duration of a wait is
 * unknown when the thread switches out, which is the only moment its user
 * stack and trace context can be read (at switch-in the CPU runs the
 * previous task's address space). So the decision is taken at switch-out
 * from what is known then: the thread's cycle c, the time since its
 * previous blocking switch-out (its previous wait plus the run since). With
 * threshold T the wait is captured with probability
 *
 *     q = min(1, c / T)
 *
 * and emitted at switch-in with value d / q (Horvitz-Thompson): since the
 * coin is drawn independently of d, E[1{captured} * d / q] = d for every
 * wait, so sums per stack, per span or per thread are unbiased. Threads that
 * switch less often than once per T (the ones with long waits) are recorded
 * exactly; a thread is captured at most about 1/T times per second whatever
 * its switch rate, because the cycles of its waits add up to at most the
 * elapsed time. The cost per switch of the switch-heavy threads is then two
 * task-storage lookups and a read of the run queue's clock, plus a full
 * capture on a fraction c/T of their switches.
 *
 * Preemptions (prev_state TASK_RUNNING, or the preempt flag) are not waits:
 * the thread stayed runnable, so they are neither emitted nor counted in a
 * cycle. Kernel threads are skipped: their idle waits are not a span's. */
#ifndef SPANPROF_OFFCPU_H
#define SPANPROF_OFFCPU_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "spanprof.h"
#include "lib/maps.h"
#include "lib/stackwalk.h"

#define OFFCPU_TASK_INTERRUPTIBLE 0x1
#define OFFCPU_TASK_UNINTERRUPTIBLE 0x2

/* Set by the agent before load (--off-cpu-threshold); at most 2^32 ns so
 * that the integer coin below cannot overflow. */
volatile const __u64 offcpu_threshold_ns = 2000000;

#ifdef SPANPROF_COMPAT
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, TASK_HASH_ENTRIES);
	__type(key, __u32);
	__type(value, struct offcpu_thread);
} offcpu_threads SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_thread);
} offcpu_threads SEC(".maps");
#endif

/* Captured waits in progress, by thread id. Keyed by tid, not task storage:
 * at switch-in the raw-tracepoint fallback only has an untrusted pointer to
 * the next task. Allocated on use, so only threads blocked right now that
 * were captured take memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct offcpu_pending);
} offcpu_pending SEC(".maps");

/* Room to build a capture: it is too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_pending);
} offcpu_scratch SEC(".maps");

/* offcpu_weighted returns d * T / c without overflowing for any d that
 * fits: c < T <= 2^32, so (d % c) * T < 2^64. */
static __always_inline __u64 offcpu_weighted(__u64 d, __u64 cycle)
{
	__u64 t = offcpu_threshold_ns;

	if (cycle >= t)
		return d;
	return d / cycle * t + (d % cycle) * t / cycle;
}

/* offcpu_sampled draws the coin of probability min(1, cycle / T). */
static __always_inline int offcpu_sampled(__u64 cycle)
{
	__u64 t = offcpu_threshold_ns;

	if (cycle >= t)
		return 1;
	/* u < 2^32 * cycle / T, with u uniform on [0, 2^32). */
	return (__u64)bpf_get_prandom_u32() * t < (cycle << 32);
}

static __always_inline void offcpu_capture(void *ctx, struct task_struct *task, __u64 pid_tgid,
					   struct offcpu_thread *st, __u64 cycle, char state)
{
	struct offcpu_pending *p;
	struct stack_sample *s;
	__u32 zero = 0, tid = (__u32)pid_tgid;

	p = bpf_map_lookup_elem(&offcpu_scratch, &zero);
	if (!p)
		return;
	s = &p->s;
	p->cycle_ns = cycle;
	/* The thread is still current: its registers, stack and TLS are the
	 * ones it will resume with. The value is set at switch-in. */
	struct user_ctx u = {};

	fill_sample(s, task, pid_tgid, SAMPLE_OFF_CPU, state, 0);
	if (task_user_regs(s, task, &u))
		fill_user(s, &u, 1);
	p->size = fill_stacks(ctx, s, &u, 1);
	if (bpf_map_update_elem(&offcpu_pending, &tid, p, BPF_ANY)) {
		count(CNT_OFFCPU_PENDING_FULL);
		return;
	}
	st->pending = 1;
	count(CNT_OFFCPU_SAMPLES);
}

/* offcpu_clock returns the clock of this CPU's run queue, which __schedule
 * has just updated: reading it costs a few loads where bpf_ktime_get_ns
 * costs tens of nanoseconds on every switch. It only sets the cycle, that
 * is the sampling probability, which need not be exact to keep the
 * estimate unbiased (it must only be known before the coin is drawn): the
 * clock can lag (__schedule skips the update right after a wakeup that
 * preempts), and it is sched_clock rather than CLOCK_MONOTONIC. Durations
 * and timestamps of captured waits use bpf_ktime_get_ns, read only for
 * them. Kernels without group scheduling have no cfs_rq->rq and use
 * bpf_ktime_get_ns. Returns 0 when the run queue cannot be found. */
static __always_inline __u64 offcpu_clock(struct task_struct *task)
{
	if (bpf_core_field_exists(struct cfs_rq, rq)) {
		struct cfs_rq *cfs = TREAD(task, se.cfs_rq);
		struct rq *rq;

		if (!cfs)
			return 0;
		rq = TREAD(cfs, rq);
		if (!rq)
			return 0;
		return TREAD(rq, clock);
	}
	return bpf_ktime_get_ns();
}

/* offcpu_switch_out runs in the context of the thread leaving the CPU.
 * This path runs on every switch of the machine, so it does the cheap
 * checks first and reads the task through its BTF pointer (a plain load)
 * rather than with probe reads. */
static __always_inline void offcpu_switch_out(void *ctx, struct task_struct *task, bool preempt,
					      __u64 now)
{
	struct offcpu_thread *st;
	unsigned int prev_state;
	__u64 pid_tgid, cycle;
	char state;

	if (preempt)
		return;
	/* The prev_state argument only exists from 5.18; the field holds the
	 * same value at the tracepoint. */
	prev_state = task_state(task);
	if (prev_state & OFFCPU_TASK_UNINTERRUPTIBLE)
		state = 'D';
	else if (prev_state & OFFCPU_TASK_INTERRUPTIBLE)
		state = 'S';
	else
		return; /* runnable (yield), stopped, traced or dying */
	if (!TREAD(task, mm))
		return;
	pid_tgid = bpf_get_current_pid_tgid();
	/* Threads get storage once they passed the filter, so for them the
	 * storage lookup is the filter. */
	st = TASK_GET(&offcpu_threads, task, (__u32)pid_tgid, 0);
	if (!st) {
		if (!wanted(pid_tgid >> 32))
			return;
		st = TASK_GET(&offcpu_threads, task, (__u32)pid_tgid, 1);
		if (!st) {
			count(CNT_OFFCPU_STATE_ERR);
			return;
		}
	}
	/* A thread seen for the first time has no known cycle, and the clocks
	 * of two CPUs may disagree by a little: capture those for sure. */
	cycle = now - st->last_out;
	if (!st->last_out || (__s64)cycle <= 0)
		cycle = offcpu_threshold_ns;
	st->last_out = now;
	if (!offcpu_sampled(cycle))
		return;
	offcpu_capture(ctx, task, pid_tgid, st, cycle, state);
}

/* offcpu_emit completes a captured wait of the thread taking the CPU. */
static __always_inline void offcpu_emit(__u32 tid)
{
	struct offcpu_pending *p;
	__u64 now, d, size;

	p = bpf_map_lookup_elem(&offcpu_pending, &tid);
	if (!p)
		return;
	/* The record is stamped at switch-in, the moment the thread ran
	 * again: readers place the wait in [time - value, time]. */
	now = bpf_ktime_get_ns();
	d = now - p->s.ktime_ns;
	p->s.ktime_ns = now;
	p->s.tai_ns = KTIME_TAI();
	p->s.value = offcpu_weighted(d, p->cycle_ns);
	size = p->size;
	if (size > sizeof(p->s))
		size = sizeof(p->s);
	if (bpf_ringbuf_output(&samples, &p->s, size, wakeup_flags()))
		count(CNT_RINGBUF_FULL);
	bpf_map_delete_elem(&offcpu_pending, &tid);
}

#endif
