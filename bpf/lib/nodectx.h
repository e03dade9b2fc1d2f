/* SPDX-License-Identifier: GPL-2.0 */
/* Node.js thread context (docs/thread-context.md, "Node.js"): the writer
 * (@datadog/pprof's addon, under dd-trace) publishes per thread
 * otel_thread_ctx_nodejs_v1 = {cped_slot, als_handle, als_hash, undefined}.
 * At sample time: frame = *cped_slot (the isolate's current
 * AsyncContextFrame, a JS Map); its OrderedHashMap table's bucket of
 * als_hash leads through the entry chain to the entry whose key is the
 * AsyncLocalStorage (*als_handle); its value is the writer's API object,
 * whose embedder field leads to the OTEP 4947 record. Every step checks
 * what it reads (tags, Smis, sizes, the table's length, the value's
 * instance type, the record's valid byte); a failed step counts
 * CNT_NODE_CTX_ERR and yields no context.
 * 64-bit V8 without pointer compression (Node's release builds). */
#ifndef SPANPROF_NODECTX_H
#define SPANPROF_NODECTX_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "spanprof.h"
#include "arch.h"
#include "lib/maps.h"
#include "lib/spanid.h"

#define NODE_HEAP_TAG 1ULL
#define NODE_MAX_BUCKETS (1LL << 16)
#define NODE_MAX_CHAIN 8
/* v8-internal.h: Internals::kMapInstanceTypeOffset and the API object
 * instance types (kJSSpecialApiObjectType, [kJSObjectType,
 * kLastJSApiObjectType]). */
#define NODE_MAP_INSTANCE_TYPE 12
#define NODE_SPECIAL_API_OBJECT 0x410
#define NODE_JS_OBJECT 0x421
#define NODE_LAST_API_OBJECT 0x80a

static __always_inline int node_is_heap(__u64 v)
{
	return (v & 3) == NODE_HEAP_TAG && v > 0x1000;
}

/* A 64-bit Smi holds its value in the upper half, the lower one zero. */
static __always_inline int node_smi(__u64 v, __s64 *out)
{
	if (v & 0xffffffffULL)
		return 0;
	*out = (__s64)(__s32)(v >> 32);
	return 1;
}

static __always_inline int node_read(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (void *)addr);
}

/* The discovery struct's address for this thread (glibc TLS). */
static __always_inline int node_disc_addr(struct task_struct *task, struct node_ctx_config *nc,
					  __u64 *addr)
{
	__u64 tp = TASK_TP(task), dtv = 0, slots = 0, block = 0;

	if (!tp)
		return 0;
	if (nc->tls_kind == TLS_STATIC_TP) {
		*addr = tp + nc->tls_offset;
		return 1;
	}
	if (nc->tls_kind != TLS_DTV)
		return 0;
	if (node_read(&dtv, tp + TCB_DTV_OFF) || !dtv || node_read(&slots, dtv - 16))
		return -1;
	if (nc->tls_module > slots)
		return 0;
	if (node_read(&block, dtv + 16 * nc->tls_module))
		return -1;
	if (!block || block == ~0ULL)
		return 0;
	*addr = block + nc->tls_offset;
	return 1;
}

/* read_node_ctx: 1 when s got ids; 0 when the thread is in no span (or
 * not yet set up); a failed step counts and gives 0. */
static __always_inline int read_node_ctx(struct stack_sample *s, struct task_struct *task,
					 struct proc_config *cfg)
{
	struct node_ctx_config *nc = &cfg->node;
	struct otel_thread_ctx_hdr hdr;
	__u64 disc[4], frame = 0, als = 0, table = 0, hdrw[4], raw = 0, ent[3], vmap = 0, rec = 0;
	__s64 length, nelems, ndel, nbuckets, entry;
	__u16 itype = 0;
	__u64 addr = 0, base, value = 0;
	int r, i, found = 0;

	r = node_disc_addr(task, nc, &addr);
	if (r <= 0)
		goto out;
	if (bpf_probe_read_user(disc, sizeof(disc), (void *)addr))
		goto fail;
	if (!disc[0] || !disc[1] || !disc[3])
		return 0; /* the writer has not been set up on this thread */
	if (node_read(&frame, disc[0]))
		goto fail;
	if (frame == disc[3] || !frame)
		return 0; /* no AsyncContextFrame: no span */
	if (!node_is_heap(frame) || node_read(&als, disc[1]) || !node_is_heap(als))
		goto fail;
	if (node_read(&table, frame - NODE_HEAP_TAG + nc->map_table_off) || !node_is_heap(table))
		goto fail;
	base = table - NODE_HEAP_TAG;
	/* FixedArray {map, length}, then elements, deleted, buckets. */
	if (bpf_probe_read_user(hdrw, sizeof(hdrw), (void *)(base + 8)))
		goto fail;
	if (!node_smi(hdrw[0], &length) || !node_smi(hdrw[1], &nelems) || !node_smi(hdrw[2], &ndel) ||
	    !node_smi(hdrw[3], &nbuckets))
		goto fail;
	if (nbuckets <= 0 || nbuckets > NODE_MAX_BUCKETS || (nbuckets & (nbuckets - 1)))
		goto fail;
	if (length != 3 + nbuckets + 2 * nbuckets * 3 || nelems < 0 || ndel < 0 ||
	    nelems + ndel > 2 * nbuckets)
		goto fail;
	/* slot i of the table is at base + 16 + 8 * i */
	if (node_read(&raw, base + 16 + 8 * (3 + ((__s64)(__s32)disc[2] & (nbuckets - 1)))))
		goto fail;
	if (!node_smi(raw, &entry))
		goto fail;
	for (i = 0; i < NODE_MAX_CHAIN; i++) {
		if (entry == -1)
			break;
		if (entry < 0 || entry >= nelems + ndel)
			goto fail;
		if (bpf_probe_read_user(ent, sizeof(ent),
					(void *)(base + 16 + 8 * (3 + nbuckets + 3 * entry))))
			goto fail;
		if (ent[0] == als) {
			value = ent[1];
			found = 1;
			break;
		}
		if (!node_smi(ent[2], &entry))
			goto fail;
	}
	if (!found) {
		if (entry != -1)
			goto fail; /* chain longer than NODE_MAX_CHAIN */
		return 0;
	}
	if (value == disc[3])
		return 0; /* the store holds undefined: outside spans */
	if (!node_is_heap(value) || node_read(&vmap, value - NODE_HEAP_TAG) || !node_is_heap(vmap))
		goto fail;
	if (bpf_probe_read_user(&itype, sizeof(itype), (void *)(vmap - NODE_HEAP_TAG + NODE_MAP_INSTANCE_TYPE)))
		goto fail;
	if (itype != NODE_SPECIAL_API_OBJECT && (itype < NODE_JS_OBJECT || itype > NODE_LAST_API_OBJECT))
		goto fail;
	if (node_read(&rec, value - NODE_HEAP_TAG + nc->wrapped_off) || !rec || (rec & 7))
		goto fail;
	if (nc->record_slot >= 0 && (node_read(&rec, rec + nc->record_slot) || !rec || (rec & 1)))
		goto fail;
	if (bpf_probe_read_user(&hdr, sizeof(hdr), (void *)rec))
		goto fail;
	if (hdr.valid != 1 || hdr.attrs_data_size > OTEL_CTX_MAX_ATTRS || is_zero_trace(hdr.trace_id)) {
		count(CNT_CTX_INVALID);
		return 0;
	}
	__builtin_memcpy(s->trace_id, hdr.trace_id, sizeof(s->trace_id));
	__builtin_memcpy(s->span_id, hdr.span_id, sizeof(s->span_id));
	s->ctx_source = CTX_NODE;
	s->ctx_record = rec;
	s->attrs_len = hdr.attrs_data_size;
	return 1;
out:
	if (r == 0)
		return 0;
fail:
	count(CNT_NODE_CTX_ERR);
	return 0;
}

#endif
