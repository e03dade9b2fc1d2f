/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The maps the sampler's parts share: its counters (count()), the task
 * storage of span contexts, the per-process trace-context configuration
 * and the OTel instrumentation's map; the ring and the pid filter are
 * shared.h's, with the exit capture. */
#ifndef SPANPROF_LIB_MAPS_H
#define SPANPROF_LIB_MAPS_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "spanprof.h"
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

#endif
