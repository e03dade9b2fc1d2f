// Lint fixture: every eBPF rule fires once.
#include "vmlinux.h"

struct event {
	__u32 pid;
	__u64 ts;
	__u64 ustack[127];
};

SEC("tp_btf/sched_switch")
int on_switch(u64 *ctx)
{
	struct event e = {};
	e.ts = bpf_ktime_get_ns();
	if (e.pid)
		bpf_printk("switch %d", e.pid);
	return 0;
}
