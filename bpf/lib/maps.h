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
#include "lib/compat.h"

/* Set when the OTel instrumentation's traces_ctx_v1 map is pinned and
 * replaces the empty stand-in; otherwise its lookup is compiled out. */
volatile const __u8 otel_map = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

#ifdef SPANPROF_COMPAT
/* No task storage in tracing programs before 5.11: by thread id. The
 * perf_event program reads it, and 5.10 gives those only preallocated
 * hashes ("perf_event programs can only use preallocated hash map"):
 * about 100 bytes a thread, allocated at load, hence fewer threads than
 * offcpu_threads, which the sched_switch programs alone use. Only threads
 * of binaries with spanprof_set_trace_context take an entry. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TASK_CTX_ENTRIES);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, __u32);
	__type(value, struct trace_context);
} task_trace_context SEC(".maps");
#else
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, int);
	__type(value, struct trace_context);
} task_trace_context SEC(".maps");
#endif

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

/* TASK_GET(map, task, tid, create) is the entry of thread task (whose id
 * is tid) in a per-thread map, created zeroed when create is set: task
 * storage, or in the compat object a hash by thread id, whose full table
 * is counted. */
#ifdef SPANPROF_COMPAT
static __always_inline void *compat_task_get(void *map, __u32 tid, int create)
{
	__u64 zero[5] = {};
	void *v = bpf_map_lookup_elem(map, &tid);

	if (v || !create)
		return v;
	long err = bpf_map_update_elem(map, &tid, zero, BPF_NOEXIST);

	if (err && err != -17 /* EEXIST */) {
		count(CNT_TASK_HASH_FULL); /* E2BIG: full; ENOMEM */
		return 0;
	}
	return bpf_map_lookup_elem(map, &tid);
}
#define TASK_GET(map, task, tid, create) compat_task_get(map, tid, create)
_Static_assert(sizeof(struct trace_context) <= 40 && sizeof(struct offcpu_thread) <= 40,
	       "compat_task_get's zero value holds the per-thread values");
#else
#define TASK_GET(map, task, tid, create)                                                            \
	bpf_task_storage_get(map, task, 0, (create) ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0)
#endif

#endif
