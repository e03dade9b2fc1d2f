/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The stacks of a sample: the user registers, the window of user stack
 * copied for user space to unwind frameless code in, the frame-pointer
 * walks of the user stack and the kernel's, and the sample's common fields
 * (fill_sample). */
#ifndef SPANPROF_LIB_STACKWALK_H
#define SPANPROF_LIB_STACKWALK_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"
#include "lib/tracectx.h"
#include "lib/windows.h"

/* Bytes of user stack read at once. Every bpf_probe_read_user costs about
 * as much as copying a kilobyte here (and a faulting one several times
 * more), so the frame-pointer walk reads the stack from the stack pointer
 * in chunks of this size and takes its frames from the copies, where
 * bpf_get_stack reads user memory once per frame. The first chunk is read
 * straight into the record, as the start of the window user space unwinds
 * frameless code in; later ones go to a scratch copy. */
#define STACK_SNAP_BYTES 1024

/* A copy of stack: the record's window (up to STACK_WINDOW_MAX) or a later
 * chunk (STACK_SNAP_BYTES of it used). */
struct stack_snap {
	__u64 w[STACK_WINDOW_MAX / 8];
};

/* Index masks for the frame walks (see walk_snap): a snapshot's words,
 * and the user frames, as powers of two minus one that hold every index. */
#define SNAP_WORD_MASK (STACK_WINDOW_MAX / 8 - 1)
#define FRAME_IDX_MASK 127
_Static_assert(MAX_USER_FRAMES <= FRAME_IDX_MASK + 1, "FRAME_IDX_MASK must hold every user frame index");
_Static_assert(STACK_SNAP_BYTES <= STACK_WINDOW_MAX, "a chunk fits a snapshot");
_Static_assert((STACK_WINDOW_MAX & (STACK_WINDOW_MAX - 1)) == 0, "masks bound the window");

/* Words of stack_sample.data for the window and frames; the attributes
 * have CTX_ATTR_WORDS more. */
#define DATA_WORDS (STACK_WINDOW_MAX / 8 + MAX_USER_FRAMES + MAX_KERN_FRAMES)

/* window_words returns where s's frames start in data, in words: after
 * the window, bounded for the verifier. */
static __always_inline __u64 window_words(struct stack_sample *s)
{
	__u64 fo = s->window_len / 8;

	if (fo > STACK_WINDOW_MAX / 8)
		fo = STACK_WINDOW_MAX / 8;
	return fo;
}

/* data_at returns the index of word i of s's frames in data, or
 * DATA_WORDS when it would not fit (never, for the i the walks pass). The
 * bound is checked on the final index, right before its use: 6.1's
 * verifier loses the window's bound when clang spills it before the
 * clamp in window_words, and the walks' loops then index with an
 * unbounded offset ("invalid access to memory"). */
static __always_inline __u64 data_at(__u64 fo, __u64 i)
{
	__u64 at = fo + (i & FRAME_IDX_MASK);

	barrier_var(at);
	if (at >= DATA_WORDS)
		return DATA_WORDS;
	return at;
}

/* One snapshot per program kind and CPU: index 0 for on-CPU ticks, 1 for
 * off-CPU captures. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct stack_snap);
} snap_scratch SEC(".maps");

/* The user registers of a sample and the stack copied from them: snap_len
 * bytes in the record's window, and the scratch for chunks further up. */
struct user_ctx {
	__u64 mode; /* cs or pstate (arch.h) */
	struct stack_snap *snap;
	__u32 snap_len;
};

/* mark_pre_exec flags a sample of a task inside execve whose saved user
 * registers are still those of the image it ran before: until start_thread
 * sets the new ones, with the stack pointer at the new mm's start_stack,
 * they point into the old image (the parent's, for a vfork or posix_spawn
 * child), although the mm and the name may be the new ones already. User
 * space symbolizes such a sample against the image before the exec, which
 * for a vfork child is its parent's: hence the parent's tgid. Once
 * start_thread has set them, the sample is the new image's and is flagged
 * so (SAMPLE_NEW_IMAGE) with the new mm, which the exec event names too:
 * user space hands it on after that event. */
static __always_inline void mark_pre_exec(struct stack_sample *s, struct task_struct *task,
					  struct mm_struct *mm)
{
#ifdef SPANPROF_COMPAT
	if (!BPF_CORE_READ_BITFIELD_PROBED(task, in_execve))
		return;
#else
	if (!BPF_CORE_READ_BITFIELD(task, in_execve))
		return;
#endif
	if (s->user_sp == TREAD(mm, start_stack)) {
		/* The new image's registers: from start_thread to the exec
		 * tracepoint the sample comes before the event that tells user
		 * space of the image (on_exec), which names the same mm. */
		s->flags |= SAMPLE_NEW_IMAGE;
		s->exec_mm = (__u32)(__u64)mm;
		return;
	}
	s->flags |= SAMPLE_PRE_EXEC;
	struct task_struct *parent = TREAD(task, real_parent);

	s->parent_pid = TREAD(parent, tgid);
}

/* task_user_regs fills s's user registers from the task's saved user
 * context, the way to them when the task is in the kernel (a tick that
 * interrupted kernel code, a switch-out), and flags those taken inside an
 * exec; returns 0 for kernel threads. */
static __always_inline int task_user_regs(struct stack_sample *s, struct task_struct *task,
					  struct user_ctx *u)
{
	struct mm_struct *mm = TREAD(task, mm);
	struct pt_regs *regs;

	if (!mm)
		return 0; /* kernel thread */
	regs = TASK_PT_REGS(task);
	if (!regs)
		return 0;
	SET_USER_REGS(s, regs);
	u->mode = REGS_MODE(regs);
	mark_pre_exec(s, task, mm);
	return 1;
}

/* read_chunk copies size bytes of user stack from addr, or up to the end
 * of addr's page when the stack ends sooner. Returns the bytes copied.
 * size is a constant (STACK_SNAP_BYTES): the verifier bounds the read by it. */
static __always_inline __u32 read_chunk(struct stack_snap *snap, __u64 addr, __u32 size)
{
	__u32 len = size;

	if (bpf_probe_read_user(snap->w, size, (void *)addr)) {
		len = 4096 - (addr & 4095);
		if (len > size)
			len = size;
		if (bpf_probe_read_user(snap->w, len, (void *)addr))
			len = 0;
	}
	return len;
}

/* read_more extends a window of STACK_SNAP_BYTES to want bytes, or, when
 * the stack ends sooner (a main thread's stack, within want bytes of its
 * top), to the end of the last whole page that can be read: the page
 * after the first chunk, and as many more as the stack has. Returns the
 * bytes added. */
static __always_inline __u32 read_more(struct stack_sample *s, __u32 want)
{
	__u64 addr = s->user_sp + STACK_SNAP_BYTES;
	__u32 n, m, page;
	int i;

	if (want > STACK_WINDOW_MAX)
		want = STACK_WINDOW_MAX;
	n = (want - STACK_SNAP_BYTES) & (STACK_WINDOW_MAX - 1);
	if (n > STACK_WINDOW_MAX - STACK_SNAP_BYTES)
		return 0;
	if (!bpf_probe_read_user(&s->data[STACK_SNAP_BYTES / 8], n, (void *)addr))
		return n;
	page = (4096 - (addr & 4095)) & 4095;
	for (i = STACK_WINDOW_MAX / 4096; i >= 0; i--) {
		m = page + (__u32)i * 4096;
		if (m >= n)
			continue; /* n itself failed */
		m &= STACK_WINDOW_MAX - 1;
		if (!m || m > STACK_WINDOW_MAX - STACK_SNAP_BYTES)
			continue;
		if (!bpf_probe_read_user(&s->data[STACK_SNAP_BYTES / 8], m, (void *)addr))
			return m;
	}
	return 0;
}

/* stack_room returns want, or less where the stack ends sooner: on a main
 * thread, whose stack ends a little above the environment strings
 * (mm->env_end), the bytes from sp up to them. A read past the stack's
 * end faults, and a faulting read costs as much as several that do not
 * (then read_more retries page by page); a process's window is sized to
 * twice what its deepest stacks needed, which on a shallow main thread
 * reaches past the top. Other threads' stacks lie elsewhere and keep
 * want. */
static __always_inline __u32 stack_room(__u64 sp, __u32 want)
{
	struct task_struct *task = CURRENT_TASK();
	struct mm_struct *mm;
	__u64 end;

	mm = TREAD(task, mm);
	if (!mm)
		return want;
	end = TREAD(mm, env_end);
	if (end > sp && end - sp < want)
		return end - sp;
	return want;
}

/* fill_user copies the stack of the user context in s's registers, from
 * its stack pointer, into the record's window: the frame-pointer walk
 * starts in it, and user space unwinds frameless code in it. The first
 * chunk is always read; a process that needs more (stack_windows), or has
 * no size yet (its executable's, exe_windows, or new_process_window), gets
 * it in a second read. */
static __always_inline void fill_user(struct stack_sample *s, struct user_ctx *u, __u32 snap_idx)
{
	struct stack_snap *snap;
	__u32 len, bytes, *want;

	u->snap = 0;
	u->snap_len = 0;
	if (!s->user_ip)
		return;
	snap = bpf_map_lookup_elem(&snap_scratch, &snap_idx);
	if (!snap)
		return;
	len = read_chunk((struct stack_snap *)s->data, s->user_sp, STACK_SNAP_BYTES);
	if (len == STACK_SNAP_BYTES) {
		want = bpf_map_lookup_elem(&stack_windows, &s->pid);
		bytes = want ? *want : new_window(s->user_ip);
		if (bytes > STACK_SNAP_BYTES)
			bytes = stack_room(s->user_sp, bytes);
		if (bytes > STACK_SNAP_BYTES)
			len += read_more(s, bytes);
	}
	len &= ~7U;
	u->snap = snap;
	u->snap_len = len;
	s->window_len = len;
	if (!len)
		count(CNT_STACK_TOP_ERR);
}

/* fill_sample writes who, when, and the trace context of a sample of the
 * current task. The user registers and stack come after (fill_user): the
 * context reads before them keep the verifier from exploring them once
 * per kind of user context. */
static __always_inline void fill_sample(struct stack_sample *s, struct task_struct *task, __u64 pid_tgid,
					__u8 kind, __u8 state, __u64 value)
{
	s->ktime_ns = bpf_ktime_get_ns();
	/* An off-CPU capture is stamped when it is emitted (offcpu_emit). */
	s->tai_ns = kind == SAMPLE_ON_CPU ? KTIME_TAI() : 0;
	s->value = value;
	s->pid = pid_tgid >> 32;
	s->tid = (__u32)pid_tgid;
	s->cpu = bpf_get_smp_processor_id();
	s->kind = kind;
	s->ctx_source = CTX_NONE;
	s->state = state;
	s->flags = 0;
	s->parent_pid = 0;
	s->user_ip = 0;
	s->user_sp = 0;
	s->user_bp = 0;
	s->user_lr = 0;
	s->window_len = 0;
	s->ctx_record = 0;
	s->attrs_len = 0;
	s->pad2 = 0;
	s->exec_mm = 0;
	/* task is current; reading its comm directly spares a helper call. */
#ifdef SPANPROF_COMPAT
	bpf_get_current_comm(s->comm, sizeof(s->comm));
#else
	__builtin_memcpy(s->comm, task->comm, sizeof(s->comm));
#endif
	__builtin_memset(s->trace_id, 0, sizeof(s->trace_id));
	__builtin_memset(s->span_id, 0, sizeof(s->span_id));
	read_trace_context(s, task, pid_tgid);
}

/* Room to build a sample: too large for the BPF stack. The ring gets only
 * the used part of it. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sample);
} sample_scratch SEC(".maps");

/* Where a frame-pointer walk stands: the next frame address and how many
 * frames were stored. */
struct walk_pos {
	__u64 bp;
	__u64 n;
};

/* frame_addr reports whether bp can be a frame pointer: aligned and in
 * user space above page 0. glibc leaves small integers in rbp below main
 * (rbp is 1 there); reading them would fault, and a faulting read costs
 * more than the rest of a sample. The kernel's walk reads them anyway. */
static __always_inline int frame_addr(__u64 bp)
{
	return bp >= 4096 && !(bp & 7) && bp < (1ULL << 56);
}

/* The stack a frame chain can span: frames farther above the sampled
 * stack pointer are read one by one rather than in chunks. */
#define MAX_STACK_SPAN (8 << 20)

/* Chunks of stack read after the first when the frame chain leaves it:
 * deep stacks cost one read per kilobyte instead of one per frame. */
#define EXTRA_CHUNKS 3

/* The compat object has no global functions taking pointers (Linux 5.12;
 * 5.10: "Arg#0 type PTR in walk_user() is not supported yet"), and as
 * static subprograms verified at each call the walks below pass the
 * verifier's million instructions: there the kernel walks the user
 * stack (bpf_get_stack, one read per frame), as for 32-bit processes. */
#ifndef SPANPROF_COMPAT
/* walk_snap follows the frame-pointer chain, like the kernel's
 * perf_callchain_user, through a copy of the stack (len bytes from base)
 * until a frame lies outside it. Global functions, this one and walk_mem,
 * are verified once each, whatever the paths into them; one loop each
 * keeps the verifier's paths linear. */
__noinline int walk_snap(struct stack_sample *s, struct stack_snap *snap, __u64 base, __u32 len,
			 struct walk_pos *pos)
{
	__u64 bp, off, w, n, idx, fo, at;
	int j;

	if (!s || !snap || !pos)
		return 0;
	fo = window_words(s);
	bp = pos->bp;
	n = pos->n;
	for (j = 0; j < MAX_USER_FRAMES; j++) {
		idx = n + j;
		/* An index, not a pointer stepped along the loop: the
		 * verifier bounds it by the check below. */
		barrier_var(idx);
		off = bp - base;
		w = off / 8;
		if (idx >= MAX_USER_FRAMES || !frame_addr(bp) || off + 16 > len ||
		    w >= STACK_WINDOW_MAX / 8 - 1)
			break;
		/* The verifiers before 6.18 lose the bounds the checks above
		 * give (6.12: "math between mem pointer and register with
		 * unbounded min value"); masks they can follow restate them.
		 * For every value that gets here they change nothing: two ANDs
		 * per frame. barrier_var keeps clang from dropping them. */
		barrier_var(w);
		barrier_var(idx);
		at = data_at(fo, idx);
		if (at >= DATA_WORDS)
			break;
		s->data[at] = snap->w[(w + 1) & SNAP_WORD_MASK];
		bp = snap->w[w & SNAP_WORD_MASK];
	}
	pos->bp = bp;
	pos->n = n + j;
	return 0;
}

/* walk_mem continues a walk in user memory, one read per frame. */
__noinline int walk_mem(struct stack_sample *s, struct walk_pos *pos)
{
	__u64 bp, fr[2], n, idx, fo, at;
	int j;

	if (!s || !pos)
		return 0;
	fo = window_words(s);
	bp = pos->bp;
	n = pos->n;
	for (j = 0; j < MAX_USER_FRAMES; j++) {
		idx = n + j;
		barrier_var(idx);
		if (idx >= MAX_USER_FRAMES || !frame_addr(bp) ||
		    bpf_probe_read_user(fr, sizeof(fr), (void *)bp))
			break;
		barrier_var(idx);
		at = data_at(fo, idx);
		if (at >= DATA_WORDS)
			break;
		s->data[at] = fr[1];
		bp = fr[0];
	}
	pos->n = n + j;
	return 0;
}

/* walk_user walks a 64-bit user context's frame pointers and returns the
 * number of frames in s->frames: through the window fill_user copied
 * (snap_len bytes from user_sp), then through further chunks read into
 * snap from the next frame on, then frame by frame. Global, so verified
 * once. */
__noinline long walk_user(struct stack_sample *s, struct stack_snap *snap, __u32 snap_len)
{
	struct walk_pos pos = {};
	__u64 before, first;
	__u32 len;

	if (!s)
		return 0;
	pos.bp = s->user_bp;
	pos.n = 1;
	first = data_at(window_words(s), 0);
	if (first >= DATA_WORDS)
		return 0;
	s->data[first] = s->user_ip;
	if (snap) {
		walk_snap(s, (struct stack_snap *)s->data, s->user_sp, snap_len, &pos);
		for (int c = 0; c < EXTRA_CHUNKS; c++) {
			if (!frame_addr(pos.bp) || pos.n >= MAX_USER_FRAMES || pos.bp < s->user_sp ||
			    pos.bp - s->user_sp > MAX_STACK_SPAN)
				break;
			len = read_chunk(snap, pos.bp, STACK_SNAP_BYTES);
			before = pos.n;
			walk_snap(s, snap, pos.bp, len, &pos);
			if (pos.n == before)
				break; /* a frame the copy cannot hold: go frame by frame */
		}
	}
	if (frame_addr(pos.bp) && pos.n < MAX_USER_FRAMES)
		walk_mem(s, &pos);
	return pos.n < MAX_USER_FRAMES ? pos.n : MAX_USER_FRAMES;
}

#endif

/* append_attrs copies the thread-context record's attributes into data
 * at word words, right after the frames, and returns the words used
 * then. Both the position and the length are bounded where they are used,
 * for the verifiers of 6.1 and 6.12 (see data_at). A failed read sends the
 * sample without attributes, counted. */
static __always_inline __u64 append_attrs(struct stack_sample *s, __u64 words)
{
	__u64 at = words, n = s->attrs_len;

	if (!n || !s->ctx_record)
		return words;
	barrier_var(n);
	if (n > OTEL_CTX_MAX_ATTRS)
		n = OTEL_CTX_MAX_ATTRS;
	barrier_var(at);
	if (at > DATA_WORDS)
		at = DATA_WORDS;
	if (bpf_probe_read_user(&s->data[at], n, (void *)(s->ctx_record + sizeof(struct otel_thread_ctx_hdr)))) {
		count(CNT_CTX_ATTRS_ERR);
		s->attrs_len = 0;
		return words;
	}
	s->attrs_len = n;
	return at + (n + 7) / 8;
}

/* fill_stacks walks the user stack, then the kernel stack right after it,
 * and returns how many bytes of s hold data. */
static __always_inline __u64 fill_stacks(void *ctx, struct stack_sample *s, struct user_ctx *u, int kernel)
{
	__u64 nu = 0, nk = 0, fo = window_words(s), ua, ka, words;
	long n;

	/* Every index into data is bounded where it is used (data_at): see
	 * there for why. */
	ua = data_at(fo, 0);
	if (!s->user_ip)
		n = 0; /* kernel thread */
#ifndef SPANPROF_COMPAT
	else if (MODE_USER_64(u->mode))
		n = walk_user(s, u->snap, u->snap_len) * sizeof(__u64);
#endif
	else if (ua <= DATA_WORDS - MAX_USER_FRAMES) /* a 32-bit process: the kernel knows its frame layout */
		n = bpf_get_stack(ctx, &s->data[ua], MAX_USER_FRAMES * sizeof(__u64), BPF_F_USER_STACK);
	else
		n = 0;
	if (n < 0) {
		count(CNT_USTACK_ERR);
		s->user_frames = n;
	} else {
		nu = (n >> 3) & 127;
		s->user_frames = nu;
	}
	/* A tick that interrupted user code has no kernel stack to walk. */
	ka = data_at(fo, nu);
	n = kernel && ka <= DATA_WORDS - MAX_KERN_FRAMES ?
		    bpf_get_stack(ctx, &s->data[ka], MAX_KERN_FRAMES * sizeof(__u64), 0) : 0;
	if (n < 0) {
		count(CNT_KSTACK_ERR);
		s->kern_frames = n;
	} else {
		nk = (n >> 3) & 127;
		if (nk > MAX_KERN_FRAMES)
			nk = MAX_KERN_FRAMES;
		s->kern_frames = nk;
	}
	words = fo + nu + nk;
	barrier_var(words);
	if (words > DATA_WORDS)
		words = DATA_WORDS;
	words = append_attrs(s, words);
	return __builtin_offsetof(struct stack_sample, data) + words * sizeof(__u64);
}

#endif
