// Lint fixture: record with trace context, no printk in the hot path.
#include "vmlinux.h"
#include "record.h"

SEC("perf_event")
int on_cpu(void *ctx)
{
	struct sample s = {};
	s.ktime_ns = bpf_ktime_get_ns();
	// bpf_printk("not code, a comment");
	return 0;
}

SEC("uprobe//bin/true:main")
int debug_probe(void *ctx)
{
	bpf_printk("slow path is fine");
	return 0;
}
