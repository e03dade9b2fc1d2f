/* SPDX-License-Identifier: GPL-2.0 */
/* Elastic APM's per-thread correlation buffer.
 *
 * The Elastic APM Java agent (universal_profiling_integration_enabled)
 * publishes elastic_apm_profiling_correlation_tls_v1, a TLS pointer in its
 * JVMTI library, to a per-thread buffer in the machine's byte order:
 *   u16 layout minor version, u8 valid, u8 trace present, u8 trace flags,
 *   trace id[16], span id[8], local root span (transaction) id[8]
 * The agent clears valid, rewrites the rest, then sets valid again. */
#ifndef SPANPROF_ELASTIC_H
#define SPANPROF_ELASTIC_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"
#include "lib/spanid.h"

struct elastic_corr_tls {
	__u16 minor_version;
	__u8 valid;
	__u8 trace_present;
	__u8 trace_flags;
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 local_root_span_id[8];
} __attribute__((packed));

/* elastic_tls_addr is the address of the thread's variable, as
 * read_thread_ctx computes its own: 1 found, 0 none for this thread, -1 a
 * fault. */
static __always_inline int elastic_tls_addr(struct task_struct *task, struct proc_config *cfg, __u64 *addr)
{
	__u64 tp, dtv = 0, block = 0, slots = 0;

	tp = TASK_TP(task);
	if (!tp)
		return 0;
	if (cfg->elastic_kind == TLS_STATIC_TP) {
		*addr = tp + cfg->elastic_offset;
		return 1;
	}
	if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + TCB_DTV_OFF)) || !dtv)
		return -1;
	if (cfg->elastic_kind == TLS_DTV_MUSL) {
		if (bpf_probe_read_user(&slots, sizeof(slots), (void *)dtv))
			return -1;
		if (cfg->elastic_module > slots)
			return 0;
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 8 * cfg->elastic_module)))
			return -1;
	} else {
		if (bpf_probe_read_user(&slots, sizeof(slots), (void *)(dtv - 16)))
			return -1;
		if (cfg->elastic_module > slots)
			return 0;
		if (bpf_probe_read_user(&block, sizeof(block), (void *)(dtv + 16 * cfg->elastic_module)))
			return -1;
	}
	if (!block || block == ~0ULL)
		return 0; /* this thread has not touched the library's TLS yet */
	*addr = block + cfg->elastic_offset;
	return 1;
}

/* read_elastic_ctx links s to the thread's Elastic span when the buffer is
 * valid and holds a trace. A buffer being rewritten (valid 0), of an
 * unknown major layout or with a zero trace id is counted as invalid; an
 * unreadable one as a read error. Returns 1 when s got ids. */
static __always_inline int read_elastic_ctx(struct stack_sample *s, struct task_struct *task,
					    struct proc_config *cfg)
{
	struct elastic_corr_tls b;
	__u64 addr = 0, ptr = 0;
	int r;

	r = elastic_tls_addr(task, cfg, &addr);
	if (r < 0)
		goto fault;
	if (!r)
		return 0;
	if (bpf_probe_read_user(&ptr, sizeof(ptr), (void *)addr))
		goto fault;
	if (!ptr)
		return 0; /* the thread never had a span */
	if (bpf_probe_read_user(&b, sizeof(b), (void *)ptr))
		goto fault;
	if (b.valid != 1 || b.minor_version < 1) {
		count(CNT_CTX_INVALID);
		return 0;
	}
	if (!b.trace_present)
		return 0; /* no span active on the thread */
	if (is_zero_trace(b.trace_id)) {
		count(CNT_CTX_INVALID);
		return 0;
	}
	__builtin_memcpy(s->trace_id, b.trace_id, sizeof(s->trace_id));
	__builtin_memcpy(s->span_id, b.span_id, sizeof(s->span_id));
	/* The local root span id rides in ctx_record, which only CTX_THREAD
	 * uses as an address (attrs_len stays 0: nothing is copied). */
	__builtin_memcpy(&s->ctx_record, b.local_root_span_id, sizeof(s->ctx_record));
	s->ctx_source = CTX_ELASTIC;
	return 1;
fault:
	count(CNT_CTX_READ_ERR);
	return 0;
}

#endif /* SPANPROF_ELASTIC_H */
