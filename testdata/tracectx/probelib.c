/* probelib.c - the thread context defined in a shared library, accessed
 * with TLSDESC (-fPIC -mtls-dialect=gnu2). Used by tlsprobe-lib (DT_NEEDED,
 * static TLS) and tlsprobe-dlopen (dlopen: static surplus or DTV). */
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"

/* The address this thread's otel_thread_ctx_v1 has: the test's ground truth. */
void *probe_addr(void)
{
	return &otel_thread_ctx_v1;
}

int probe_enter(const uint8_t *trace_id, const uint8_t *span_id)
{
	if (otel_thread_ctx_enter(trace_id, span_id, 1) != 0)
		return -1;
	return otel_thread_ctx_set_attr(0, "probe", 5);
}

void probe_leave(void)
{
	otel_thread_ctx_leave();
}

int probe_publish(const char *service)
{
	static const char *const keys[] = {"probe.attr"};
	otel_process_ctx_attr attrs[] = {
		{"service.name", service},
		{"service.instance.id", "probe-instance-1"},
		{"deployment.environment.name", "test"},
	};
	return otel_process_ctx_publish(attrs, 3, keys, 1);
}
