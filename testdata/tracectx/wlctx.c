/* wlctx.c - the workload's thread context in a shared library built with
 * -fPIC -mtls-dialect=gnu2, so every access is a TLSDESC call. */
#define OTEL_THREAD_CTX_IMPLEMENTATION
#include "otel_thread_ctx.h"

int wl_enter(const uint8_t *trace_id, const uint8_t *span_id, const otel_thread_ctx_attr *attrs, size_t n)
{
	return otel_thread_ctx_enter_attrs(trace_id, span_id, 1, attrs, n);
}

void wl_leave(void)
{
	otel_thread_ctx_leave();
}

int wl_publish(const otel_process_ctx_attr *attrs, size_t n, const char *const *keys, size_t nkeys)
{
	return otel_process_ctx_publish(attrs, n, keys, nkeys);
}
