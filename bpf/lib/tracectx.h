/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The trace context a sample runs in, read in the kernel at sample time
 * from the sources of SPEC in order: the thread context record (OTEP 4947,
 * Node.js, Elastic APM), goroutine labels, task storage, the OTel
 * instrumentation's map. */
#ifndef SPANPROF_LIB_TRACECTX_H
#define SPANPROF_LIB_TRACECTX_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"
#include "lib/spanid.h"
#include "lib/golabels.h"

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

#include "lib/nodectx.h"
#include "lib/elastic.h"

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
	tc = TASK_GET(&task_trace_context, task, (__u32)pid_tgid, 0);
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

#endif
