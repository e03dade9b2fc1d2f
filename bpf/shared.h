/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the sampler (sampler.bpf.c) and the exit capture (exitmaps.bpf.c)
 * share: the ring both write to and the process filter. The exit capture
 * is loaded with the sampler's maps in place of its own, so both objects
 * declare them from here, alike. */
#ifndef SPANPROF_SHARED_H
#define SPANPROF_SHARED_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "spanprof.h"

/* Set by the agent before load. */
volatile const __u32 self_tgid = 0;
volatile const __u8 filter_pids = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024);
} samples SEC(".maps");

/* Processes to sample when filter_pids is set. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} pids SEC(".maps");

/* wanted reports whether the process tgid is sampled: never the agent
 * itself or the idle task, and only the listed ones when filtering. */
static __always_inline int wanted(__u32 tgid)
{
	if (tgid == 0 || tgid == self_tgid)
		return 0;
	if (filter_pids && !bpf_map_lookup_elem(&pids, &tgid))
		return 0;
	return 1;
}

#endif
