//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* On-CPU sampler: runs on every tick of the software CPU clock, copies the
 * user and kernel stacks (frame-pointer walk done by the kernel), the user
 * registers and the top of the user stack for the leaf fix-up, and the
 * trace context the thread runs in, into a ring buffer record. The off-CPU
 * sampler on sched_switch (offcpu.h) fills the same record. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "spanprof.h"
#include "arch.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "shared.h"

/* Set when the OTel instrumentation's traces_ctx_v1 map is pinned and
 * replaces the empty stand-in; otherwise its lookup is compiled out. */
volatile const __u8 otel_map = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, int);
	__type(value, struct trace_context);
} task_trace_context SEC(".maps");

/* Filled by the agent per process: where its trace context lives. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct proc_config);
} proc_configs SEC(".maps");

/* The OTel eBPF Instrumentation's map, replaced by the pinned one at load
 * time when it exists; otherwise this empty stand-in is read. */
struct otel_span_ctx {
	__u8 trace_id[16];
	__u8 span_id[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct otel_span_ctx);
} traces_ctx_v1 SEC(".maps");

/* Waking the reader on every record costs more than the rest of a sample
 * (an irq_work per submit); the reader polls instead, and is woken only
 * when the ring fills past this mark. */
#define WAKEUP_BYTES (1 << 20)

static __always_inline __u64 wakeup_flags(void)
{
	return bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
										: BPF_RB_NO_WAKEUP;
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

#include "golabels.h"

/* A W3C trace id of all zeros is invalid: never link a sample to it. */
static __always_inline int is_zero_trace(const __u8 *id)
{
	__u64 a, b;

	__builtin_memcpy(&a, id, 8);
	__builtin_memcpy(&b, id + 8, 8);
	return (a | b) == 0;
}

/* read_thread_ctx follows OTEP 4947: the TLS pointer otel_thread_ctx_v1
 * points to a record, or is NULL outside a span. Returns 1 when s got ids. */
static __always_inline int read_thread_ctx(struct stack_sample *s, struct task_struct *task,
					   struct proc_config *cfg)
{
	struct otel_thread_ctx_hdr hdr;
	__u64 tp, addr, ptr = 0;

	tp = TASK_TP(task);
	if (!tp)
		return 0;
	if (cfg->tls_kind == TLS_STATIC_TP) {
		addr = tp + cfg->tls_offset;
	} else if (cfg->tls_kind == TLS_DTV_MUSL) {
		__u64 dtv = 0, block = 0, slots = 0;

		/* musl: dtv[0] counts the modules, dtv[i] is module i's block,
		 * set for every thread when a module is loaded. */
		if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + TCB_DTV_OFF)) || !dtv)
			goto fault;
		if (bpf_probe_read_user(&slots, sizeof(slots), (void *)dtv))
			goto fault;
		if (cfg->tls_module > slots)
			return 0;
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 8 * cfg->tls_module)))
			goto fault;
		if (!block)
			return 0;
		addr = block + cfg->tls_offset;
	} else {
		__u64 dtv = 0, block = 0;

		__u64 slots = 0;

		if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + TCB_DTV_OFF)) || !dtv)
			goto fault;
		/* dtv[-1] counts the slots; a thread whose DTV predates the
		 * module's dlopen has no slot for it yet. */
		if (bpf_probe_read_user(&slots, sizeof(slots), (void *)(dtv - 16)))
			goto fault;
		if (cfg->tls_module > slots)
			return 0;
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 16 * cfg->tls_module)))
			goto fault;
		if (!block || block == ~0ULL)
			return 0; /* this thread has not touched the module's TLS yet */
		addr = block + cfg->tls_offset;
	}
	if (bpf_probe_read_user(&ptr, sizeof(ptr), (void *)addr))
		goto fault;
	if (!ptr)
		return 0;
	if (bpf_probe_read_user(&hdr, sizeof(hdr), (void *)ptr))
		goto fault;
	/* A record claiming more attributes than OTEP 4947 allows is not one
	 * a conforming writer made: do not trust its ids either. */
	if (hdr.valid != 1 || hdr.attrs_data_size > OTEL_CTX_MAX_ATTRS || is_zero_trace(hdr.trace_id)) {
		count(CNT_CTX_INVALID);
		return 0;
	}
	__builtin_memcpy(s->trace_id, hdr.trace_id, sizeof(s->trace_id));
	__builtin_memcpy(s->span_id, hdr.span_id, sizeof(s->span_id));
	s->ctx_source = CTX_THREAD;
	/* The attributes go after the frames (append_attrs), whose number is
	 * known only once the stacks are walked. The record cannot change
	 * meanwhile: its thread is not running, and a writer never changes a
	 * published record. */
	s->ctx_record = ptr;
	s->attrs_len = hdr.attrs_data_size;
	return 1;
fault:
	count(CNT_CTX_READ_ERR);
	return 0;
}

#include "nodectx.h"
#include "elastic.h"

/* read_trace_context tries the sources of SPEC in order: thread context,
 * goroutine labels, task storage, the OTel instrumentation map. */
static __always_inline void read_trace_context(struct stack_sample *s, struct task_struct *task,
					       __u64 pid_tgid)
{
	struct proc_config *cfg;
	struct trace_context *tc;
	struct otel_span_ctx *oc;

	cfg = bpf_map_lookup_elem(&proc_configs, &s->pid);
	if (cfg) {
		if (cfg->tls_kind != TLS_NONE && read_thread_ctx(s, task, cfg))
			return;
		if (cfg->node.tls_kind != TLS_NONE && read_node_ctx(s, task, cfg))
			return;
		if (cfg->elastic_kind != TLS_NONE && read_elastic_ctx(s, task, cfg))
			return;
		if (cfg->go_layout != GO_LABELS_NONE && read_go_labels(s, task, cfg))
			return;
	}
	tc = bpf_task_storage_get(&task_trace_context, task, 0, 0);
	if (tc && !is_zero_trace(tc->trace_id)) {
		__builtin_memcpy(s->trace_id, tc->trace_id, sizeof(s->trace_id));
		__builtin_memcpy(s->span_id, tc->span_id, sizeof(s->span_id));
		s->ctx_source = CTX_TASK_STORAGE;
		return;
	}
	if (!otel_map)
		return;
	oc = bpf_map_lookup_elem(&traces_ctx_v1, &pid_tgid);
	if (oc) {
		__builtin_memcpy(s->trace_id, oc->trace_id, sizeof(s->trace_id));
		__builtin_memcpy(s->span_id, oc->span_id, sizeof(s->span_id));
		s->ctx_source = CTX_OTEL_MAP;
	}
}

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

/* Window bytes wanted per process, by tgid, beyond the first chunk: written
 * by user space for processes whose stacks the window cut (a frameless
 * function with a large frame, such as vfprintf's), deleted at exit.
 * Absent: STACK_SNAP_BYTES. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} stack_windows SEC(".maps");

/* Window bytes for a process with no stack_windows entry yet: user space
 * that sizes each process's window from what its first samples needed
 * copies them with the widest window (STACK_WINDOW_MAX), so that a
 * process's first stacks through a large frameless frame are not cut
 * before it has a size; 0 keeps STACK_SNAP_BYTES. */
volatile const __u32 new_process_window = 0;

#include "windows.h"

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
	if (!BPF_CORE_READ_BITFIELD(task, in_execve))
		return;
	if (s->user_sp == mm->start_stack) {
		/* The new image's registers: from start_thread to the exec
		 * tracepoint the sample comes before the event that tells user
		 * space of the image (on_exec), which names the same mm. */
		s->flags |= SAMPLE_NEW_IMAGE;
		s->exec_mm = (__u32)(__u64)mm;
		return;
	}
	s->flags |= SAMPLE_PRE_EXEC;
	s->parent_pid = task->real_parent->tgid;
}

/* task_user_regs fills s's user registers from the task's saved user
 * context, the way to them when the task is in the kernel (a tick that
 * interrupted kernel code, a switch-out), and flags those taken inside an
 * exec; returns 0 for kernel threads. */
static __always_inline int task_user_regs(struct stack_sample *s, struct task_struct *task,
					  struct user_ctx *u)
{
	struct mm_struct *mm = task->mm;
	struct pt_regs *regs;

	if (!mm)
		return 0; /* kernel thread */
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
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
		bytes = want ? *want : new_window();
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
	__builtin_memcpy(s->comm, task->comm, sizeof(s->comm));
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
	else if (MODE_USER_64(u->mode))
		n = walk_user(s, u->snap, u->snap_len) * sizeof(__u64);
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
	task = bpf_get_current_task_btf();

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
	struct task_struct *task = bpf_get_current_task_btf();
	struct trace_context *tc;
	__u8 tid[16], sid[8];

	if (!trace_id) {
		/* Clear in place: an update of the task's own entry cannot
		 * fail, where a delete can (-EBUSY) and leave a stale span. */
		tc = bpf_task_storage_get(&task_trace_context, task, 0, 0);
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
	tc = bpf_task_storage_get(&task_trace_context, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tc)
		return 0;
	__builtin_memcpy(tc->trace_id, tid, sizeof(tid));
	__builtin_memcpy(tc->span_id, sid, sizeof(sid));
	tc->start_ktime_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline struct proc_lifecycle *proc_event_reserve(__u32 pid, __u32 kind)
{
	struct proc_lifecycle *e;

	/* Same ring as the samples, so user space sees exec and exit in order
	 * with the samples around them; the tag tells them apart. */
	e = bpf_ringbuf_reserve(&samples, sizeof(*e), 0);
	if (!e) {
		count(CNT_PROC_EVENTS_LOST);
		return 0;
	}
	e->tag = REC_PROC_EVENT;
	e->ktime_ns = bpf_ktime_get_ns();
	e->pid = pid;
	e->kind = kind;
	e->entry = 0;
	e->interp_base = 0;
	e->exe_ino = 0;
	e->exe_dev = 0;
	e->path_len = 0;
	e->interp_ino = 0;
	e->interp_dev = 0;
	e->parent = 0;
	e->exec_mm = 0;
	e->pad = 0;
	return e;
}

struct file_id {
	__u64 ino;
	__u32 dev;
};

/* interp_file records the file of the mapping at the interpreter's base. */
static long interp_file(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct file_id *id = ctx;
	struct file *f = vma->vm_file;

	if (f) {
		id->ino = f->f_inode->i_ino;
		id->dev = f->f_inode->i_sb->s_dev;
	}
	return 0;
}

/* Whether an exec wakes the reader at once, so that a short-lived process
 * is read from /proc before it is gone. User space clears it once the
 * exit-maps programs run (bpf/exitmaps.bpf.c): they capture the mappings of
 * every process that exits before the reader gets to it, and the exec then
 * waits for the reader's next poll like a sample, which spares a reader
 * wake-up and a /proc read per short-lived process. */
volatile __u8 exec_wakeup = 1;

static __always_inline void proc_event_submit(struct proc_lifecycle *e)
{
	/* An exit waits for the next poll: nothing needs it sooner. */
	bpf_ringbuf_submit(e, e->kind == PROC_EXEC && exec_wakeup ? BPF_RB_FORCE_WAKEUP : wakeup_flags());
}

#define AT_BASE_ 7
#define AT_ENTRY_ 9
/* Pairs of the auxiliary vector looked at, beyond any kernel's
 * AT_VECTOR_SIZE / 2 (27 on x86_64 6.1, 29 from 6.4 on). */
#define AUXV_MAX_PAIRS 32

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
	if (e->interp_base && bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_find_vma)) {
		struct file_id id = {};

		bpf_find_vma(p, e->interp_base, interp_file, &id, 0);
		e->interp_ino = id.ino;
		e->interp_dev = id.dev;
	}
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

#include "offcpu.h"

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
