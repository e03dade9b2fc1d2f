/* Publishes trace context the two ways the agent reads directly: the
 * OTEP 4947 TLS pointer and the spanprof_set_trace_context uprobe hook. */
#include <stdint.h>
#include <stdio.h>

__attribute__((visibility("default"))) __thread void *otel_thread_ctx_v1;

__attribute__((noinline, visibility("default"))) void
spanprof_set_trace_context(const uint8_t *trace_id16, const uint8_t *span_id8)
{
	__asm__ volatile("" : : "r"(trace_id16), "r"(span_id8) : "memory");
}

int main(void)
{
	static uint8_t rec[28];
	otel_thread_ctx_v1 = rec;
	spanprof_set_trace_context(rec, rec + 16);
	printf("%p\n", otel_thread_ctx_v1);
	return 0;
}
