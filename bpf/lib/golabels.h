/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Reading trace_id/span_id from the pprof labels of the goroutine running
 * on the sampled thread: g from TLS -> g.m -> m.curg -> curg.labels.
 * Offsets come from the agent per process (proc_config); the two label
 * layouts are those of Go's runtime/pprof.
 *
 * A thread whose goroutine called runtime.LockOSThread runs only that
 * goroutine. When it is preempted, parks or waits for a P, its thread runs
 * the scheduler on g0 (park_m, goschedImpl, stoplockedm: handing the P
 * off, often starting a new M) with m.curg nil, on behalf of the locked
 * goroutine, m.lockedg. An on-CPU sample there is in that goroutine's span
 * and reads lockedg's labels. Only the thread itself writes m.lockedg and
 * only the goroutine itself its labels, so a sample of the thread sees
 * both as they are. A scheduler sample with no locked goroutine belongs to
 * no span and stays unlinked. Off-CPU samples do not take lockedg: the
 * locked goroutine then waits (runnable, for a P: not a span's wait) or is
 * parked, and parked goroutines are counted by the user-space goroutine
 * sampler (docs/go-offcpu.md); linking the thread's sleep too would count
 * the wait twice. */
#ifndef SPANPROF_GOLABELS_H
#define SPANPROF_GOLABELS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"

#define GO_MAX_LABELS 10

struct go_string {
	__u64 ptr;
	__u64 len;
};

/* Go >= 1.24: labels -> labelMap{ LabelSet{ list []label } }. */
struct go_slice {
	__u64 ptr;
	__u64 len;
	__u64 cap;
};

struct go_label {
	struct go_string key;
	struct go_string value;
};

/* Go <= 1.23: labels -> *labelMap, a map[string]string; one bucket when it
 * holds 8 labels or fewer (B == 0). */
struct go_hmap {
	__u64 count;
	__u8 flags;
	__u8 B;
	__u16 noverflow;
	__u32 hash0;
	__u64 buckets;
};

struct go_bucket_strings {
	__u8 tophash[8];
	struct go_string keys[8];
	struct go_string values[8];
	__u64 overflow;
};

#define GO_MIN_TOPHASH 5 /* smaller tophash values mark empty slots */

/* hex_nibble returns the value of the hex digit c ('0'-'9', 'a'-'f',
 * 'A'-'F') and sets *bad where c is none, without a branch: one path for
 * the verifier, whatever the digits. x is in [0, n) when the sign bits of
 * ~x and x - n are both set. */
static __always_inline __u64 hex_nibble(__u64 c, __u64 *bad)
{
	__s64 d = (__s64)c - '0', a = (__s64)(c | 0x20) - 'a';
	__u64 ok = ((__u64)(~d & (d - 10)) | (__u64)(~a & (a - 6))) >> 63;

	*bad |= ok ^ 1;
	return (c & 0xF) + 9 * ((c >> 6) & 1);
}

/* hex_decode decodes the 2n hex digits at src into n bytes (n <= 16). */
static __always_inline int hex_decode(__u8 *dst, const __u8 *src, int n)
{
	__u64 bad = 0;

	for (int i = 0; i < n && i < 16; i++)
		dst[i] = hex_nibble(src[2 * i], &bad) << 4 | hex_nibble(src[2 * i + 1], &bad);
	return bad ? -1 : 0;
}

/* The hex digits of a trace id (32) or span id (the first 16). */
struct label_hex {
	__u8 c[32];
};

/* decode_label_id decodes a trace_id label's value (span false) or a
 * span_id label's into the sample. Inlined at every label slot that may
 * hold an id, the decoding was 80 % of the on-CPU program's verification
 * (160k of its 198k instructions, a third of a second of kernel time at
 * every start); a global function is verified once. The compat object
 * has no global functions taking pointers (see stackwalk.h): there it is
 * inlined. */
#ifndef SPANPROF_COMPAT
__noinline int decode_label_id(struct stack_sample *s, struct label_hex *h, int span)
{
	if (!s || !h)
		return -1;
	if (span)
		return hex_decode(s->span_id, h->c, 8);
	return hex_decode(s->trace_id, h->c, 16);
}
#else
/* Inlined, the branch-free decoding costs the verifier more than
 * branches do (337k against 222k instructions for the default object's
 * on-CPU program, measured): the compat object keeps the branches. */
static __always_inline int hexval(__u8 c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static __always_inline int hex_decode_branches(__u8 *dst, const __u8 *src, int n)
{
	for (int i = 0; i < n && i < 16; i++) {
		int hi = hexval(src[2 * i]), lo = hexval(src[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		dst[i] = (hi << 4) | lo;
	}
	return 0;
}

static __always_inline int decode_label_id(struct stack_sample *s, struct label_hex *h, int span)
{
	if (span)
		return hex_decode_branches(s->span_id, h->c, 8);
	return hex_decode_branches(s->trace_id, h->c, 16);
}
#endif

/* match_label checks one key/value pair; returns a bit: 1 trace_id, 2
 * span_id, 0 other, -1 fault. */
static __always_inline int match_label(struct stack_sample *s, struct go_string *k, struct go_string *v)
{
	__u8 key[8];
	struct label_hex hex = {};

	if (k->len != 8 && k->len != 7)
		return 0;
	/* Read exactly the key's length: a 7-byte key may end a page. */
	if (k->len == 8 ? bpf_probe_read_user(key, 8, (void *)k->ptr)
			: bpf_probe_read_user(key, 7, (void *)k->ptr))
		return -1;
	if (k->len == 8 && __builtin_memcmp(key, "trace_id", 8) == 0) {
		if (v->len != 32 || bpf_probe_read_user(hex.c, 32, (void *)v->ptr))
			return -1;
		if (decode_label_id(s, &hex, 0))
			return -1;
		return 1;
	}
	if (k->len == 7 && __builtin_memcmp(key, "span_id", 7) == 0) {
		if (v->len != 16 || bpf_probe_read_user(hex.c, 16, (void *)v->ptr))
			return -1;
		if (decode_label_id(s, &hex, 1))
			return -1;
		return 2;
	}
	return 0;
}

static __always_inline int read_go_labels(struct stack_sample *s, struct task_struct *task,
					  struct proc_config *cfg)
{
	__u64 g = 0, m = 0, curg = 0, labels = 0;
	int found = 0, r;

#ifdef GO_G_REG
	/* The saved user registers: a tick that interrupted user code entered
	 * the kernel through them too, and a switch-out through a system call,
	 * which Go makes with g kept in its register. */
	struct pt_regs *regs = TASK_PT_REGS(task);

	if (!regs)
		return 0;
	g = regs->regs[GO_G_REG];
	if (!g)
		return 0;
#else
	__u64 tp = TASK_TP(task);

	if (!tp)
		return 0;
	if (bpf_probe_read_user(&g, sizeof(g), (void *)(tp + cfg->go_tls_g)) || !g)
		return 0; /* not a Go thread (yet), or a foreign thread */
#endif
	if (bpf_probe_read_user(&m, sizeof(m), (void *)(g + cfg->go_off_m)) || !m)
		goto fault;
	if (bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + cfg->go_off_curg)))
		goto fault;
	if (!curg && s->kind == SAMPLE_ON_CPU && cfg->go_off_lockedg) {
		/* The scheduler, on a thread locked to a goroutine. */
		if (bpf_probe_read_user(&curg, sizeof(curg), (void *)(m + cfg->go_off_lockedg)))
			goto fault;
	}
	if (!curg)
		return 0; /* the thread runs no goroutine: scheduler or idle */
	if (bpf_probe_read_user(&labels, sizeof(labels), (void *)(curg + cfg->go_off_labels)))
		goto fault;
	if (!labels)
		return 0;

	if (cfg->go_layout == GO_LABELS_SLICE) {
		struct go_slice list;

		if (bpf_probe_read_user(&list, sizeof(list), (void *)labels))
			goto fault;
		for (int i = 0; i < GO_MAX_LABELS; i++) {
			struct go_label l;

			if (i >= list.len)
				break;
			if (bpf_probe_read_user(&l, sizeof(l), (void *)(list.ptr + i * sizeof(l))))
				goto fault;
			r = match_label(s, &l.key, &l.value);
			if (r < 0)
				goto fault;
			found |= r;
			if (found == 3)
				break;
		}
	} else {
		struct go_hmap h;
		__u64 hp = 0;
		__u8 tophash[8];

		/* labels points to the map variable, which points to the hmap. */
		if (bpf_probe_read_user(&hp, sizeof(hp), (void *)labels) || !hp)
			goto fault;
		if (bpf_probe_read_user(&h, sizeof(h), (void *)hp))
			goto fault;
		if (h.B != 0 || !h.buckets)
			goto fault; /* more than 8 labels: not supported */
		if (bpf_probe_read_user(tophash, sizeof(tophash), (void *)h.buckets))
			goto fault;
		for (int i = 0; i < 8; i++) {
			struct go_string k, v;

			if (tophash[i] < GO_MIN_TOPHASH)
				continue;
			if (bpf_probe_read_user(&k, sizeof(k), (void *)(h.buckets + 8 + i * 16)) ||
			    bpf_probe_read_user(&v, sizeof(v), (void *)(h.buckets + 8 + 128 + i * 16)))
				goto fault;
			r = match_label(s, &k, &v);
			if (r < 0)
				goto fault;
			found |= r;
			if (found == 3)
				break;
		}
	}
	if (found != 3) {
		/* A half-set pair is not a span: never report wrong ids. */
		__builtin_memset(s->trace_id, 0, sizeof(s->trace_id));
		__builtin_memset(s->span_id, 0, sizeof(s->span_id));
		return 0;
	}
	s->ctx_source = CTX_GO_LABELS;
	return 1;
fault:
	__builtin_memset(s->trace_id, 0, sizeof(s->trace_id));
	__builtin_memset(s->span_id, 0, sizeof(s->span_id));
	count(CNT_GO_LABELS_ERR);
	return 0;
}

#endif
