//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The off-CPU estimator's helpers (lib/offcpu.h) run in the kernel by
 * BPF_PROG_TEST_RUN: each program takes its arguments in its context,
 * calls the helper the sampler calls, and writes the result back into the
 * context, which user space reads (bpf/helpertest's tests). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "lib/offcpu.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct weighted_args {
	__u64 d, cycle;
	__u64 got;
};

SEC("syscall")
int test_weighted(struct weighted_args *a)
{
	a->got = offcpu_weighted(a->d, a->cycle);
	return 0;
}

/* Coins drawn per run: the test adds up the hits of many runs. */
#define COINS 4096

struct sampled_args {
	__u64 cycle;
	__u64 hits;
};

SEC("syscall")
int test_sampled(struct sampled_args *a)
{
	__u64 hits = 0;

	for (int i = 0; i < COINS; i++)
		hits += offcpu_sampled(a->cycle);
	a->hits = hits;
	return 0;
}

const struct weighted_args *unused_weighted_args __attribute__((unused));
const struct sampled_args *unused_sampled_args __attribute__((unused));
