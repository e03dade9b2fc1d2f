/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What a trace id read from a process may be. */
#ifndef SPANPROF_LIB_SPANID_H
#define SPANPROF_LIB_SPANID_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* A W3C trace id of all zeros is invalid: never link a sample to it. */
static __always_inline int is_zero_trace(const __u8 *id)
{
	__u64 a, b;

	__builtin_memcpy(&a, id, 8);
	__builtin_memcpy(&b, id + 8, 8);
	return (a | b) == 0;
}

#endif
