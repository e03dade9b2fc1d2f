/* The shared record: stacks travel with the span they were taken in. */
#pragma once
struct span_ctx {
	__u8 trace_id[16];
	__u8 span_id[8];
};

struct sample {
	__u64 ktime_ns;
	__u32 pid, tid;
	__s32 user_stack_id;
	__s32 kern_stack_id;
	struct span_ctx ctx;
};
